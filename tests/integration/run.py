"""Runs every integration test module (tests/integration/test_*.py, or the patterns given) and
prints one closing summary line: "integration: N passed, M failed"."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)


def main():
    # Patterns (globs of file names), each discovered in turn: `make tsan` names several.
    patterns = sys.argv[1:] or ["test_*.py"]
    suite = unittest.TestSuite()
    for pattern in patterns:
        suite.addTests(unittest.defaultTestLoader.discover(here, pattern=pattern, top_level_dir=here))
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    failed = len(result.failures) + len(result.errors)
    passed = result.testsRun - failed - len(result.skipped)
    print("integration: %d passed, %d failed, %d skipped" % (passed, failed, len(result.skipped)))
    sys.exit(1 if failed or result.testsRun == 0 else 0)


if __name__ == "__main__":
    main()
