"""Travel app: day-trip planning over a city of points of interest."""
