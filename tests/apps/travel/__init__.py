"""Travel app tests (a package so test module names may repeat across apps)."""
