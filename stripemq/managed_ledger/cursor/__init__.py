"""Cursors: what a subscription has acknowledged, and how that survives a crash."""
