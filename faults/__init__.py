"""The fault catalogue (DESIGN.md section 5) and the wrappers that inject a
fault into any kernel at a given coverage."""
