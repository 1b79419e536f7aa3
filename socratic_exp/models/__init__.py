"""Models (config group ``model``): the student and its tokenizer."""
