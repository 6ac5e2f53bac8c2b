"""Pre-registered prediction matrices (YAML), their lock file and amendments."""
