"""Loggers (config group ``logger``): experiment trackers beside the run folder's own files."""
