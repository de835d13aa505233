"""Wire formats: generated protobuf modules and sans-IO codecs."""
