"""The features' own rules, torch-free, on the record: time to a target (``target``),
the gradient noise scale's estimators (``gns``), link presets and rates (``links``), the
language-model task's names and shapes (``lmspec``), and stopping on request
(``interrupt``). They import the core floor only (pyproject.toml's import contracts)."""
