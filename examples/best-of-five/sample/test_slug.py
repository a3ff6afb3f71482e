"""The slug rules; run with `python3 -m unittest`."""

import unittest

from slug import slugify


class SlugifyTest(unittest.TestCase):
    def test_joins_words_with_a_dash(self):
        self.assertEqual(slugify("hello world"), "hello-world")

    def test_lowercases(self):
        self.assertEqual(slugify("Hello World"), "hello-world")

    def test_collapses_and_trims_spaces(self):
        self.assertEqual(slugify("  hello   world "), "hello-world")
