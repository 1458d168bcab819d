"""Experiments: YAML schema and grid (schema), executors (executor), result tables and the atomic
results folder (results), figures (plots), the whole pipeline (runner), the terminal table
(report) and the `kvsim` command line (cli, one module per subcommand in commands/).

Nothing is imported eagerly: `import experiments` stays cheap.
"""
