"""`stripemq chaos`: a fault-injection verifier for a real cluster, with a verdict and a report."""
