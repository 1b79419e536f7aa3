"""Samplers (config group ``sampler``): which prompts each training batch draws."""
