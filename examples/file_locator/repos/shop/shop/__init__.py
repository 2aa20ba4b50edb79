"""The shop package of shop."""
