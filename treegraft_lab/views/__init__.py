"""The notebooks' interactive views of recorded runs (ipywidgets), one module per job.

`step_through` (StepThroughViewer: rounds and draft steps of a recorded run), `playground` (SchedulePlayground:
the controls and drawing of the schedule playground) over `session` (PlaygroundSession: its settings, replays,
table and exports, headless: a test drives it without a browser), `compare` (CompareView: two methods from one
round start), `picker` (RunPicker: record a run from the notebook), `profile` (a profile's line), `table` and
`timing` (the playground's table, CSV and the timing statistics under it), `display` (drawing helpers).
Import a view from its module: `from treegraft_lab.views.step_through import StepThroughViewer`.
"""
