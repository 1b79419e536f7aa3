"""Distillers (config group ``distiller``): knowledge distillation into the student's weights."""
