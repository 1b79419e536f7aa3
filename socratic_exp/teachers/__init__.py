"""Teachers (config group ``teacher``): guidance and viewpoints for the student."""
