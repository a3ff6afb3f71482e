"""Turns titles into URL slugs."""


def slugify(title):
    """The title's words, lowercased and joined by single dashes."""
    return title.replace(" ", "-")
