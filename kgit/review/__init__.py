"""Review: text, markdown, HTML and plot views of one campaign, and pull requests."""
