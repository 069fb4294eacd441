"""Performance benchmarks of issue #7 (not part of CI): `make bench`, results in bench/RESULTS.md."""
