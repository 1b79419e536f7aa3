"""Tasks (config group ``task``): dataset splits plus a verifier."""
