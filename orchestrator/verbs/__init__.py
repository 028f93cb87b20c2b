"""verbs: the command line's verbs, one module each: `orchestrator VERB ARGS` is `verbs/VERB.py`'s
`main(ARGS)`, which parses its arguments (with arguments.py's parser, or as a Hydra command line,
config/search.py's `CommandLine`) and calls the stage that does the work; what it returns is an `Outcome`
(console.py) that cli.py prints and turns into the exit status. A verb computes nothing of its own.

May import: triage, sweep, reproduce, imports, run, report, guard, analysis, record, config, runtime, console, errors.
"""
