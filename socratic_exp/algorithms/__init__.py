"""Algorithms (config group ``algorithm``): each builds a TRL trainer."""
