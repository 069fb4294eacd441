"""The bottom wing: unit grammars and the one source of defaults. Imports nothing else of the package."""
