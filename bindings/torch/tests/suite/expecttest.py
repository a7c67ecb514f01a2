"""A stand-in for the expecttest package (not packaged by Debian), which PyTorch's test utilities
import: the distributed tests use none of its inline-expectation asserts, only its TestCase base
and ACCEPT flag."""

import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (expecttest's name)
        self.assertEqual(actual, expect)
