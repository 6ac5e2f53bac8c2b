"""Pre-registered prediction matrices (DESIGN.md section 7); empty until the
first matrix is written."""
