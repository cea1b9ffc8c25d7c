"""Inventory: turning Node objects and DRA ResourceSlices into the portal's nodes and devices."""
