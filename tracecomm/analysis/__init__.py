"""Analysis: everything across ranks or needing outside facts, building one typed Report."""
