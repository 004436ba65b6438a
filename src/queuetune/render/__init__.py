"""Presentation: console tables and plots of the package's plain-data results."""
