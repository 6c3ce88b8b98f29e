"""Training and evaluation runs: the host side around the compiled loop.

`train(...)` builds the environment, the recipe and the compiled loop, calls
the loop, and between calls evaluates, appends to `metrics.csv`, writes
checkpoints and reports progress. Everything heavy runs inside the compiled
loop. `resume(run_dir)` continues a run from its latest checkpoint.

A run directory:

  config.json        what defines the run, a `RunConfig`: agent, task,
                     backend, num_envs, seed, env options, the agent's
                     config, total steps, eval_every, eval_episodes,
                     iterations_per_call (`RunConfig.from_json` reads it,
                     `load_run_config` loads and checks a run's)
  metrics.csv        one row per evaluation, appended
  agent_state.npz    the agent state of the latest checkpoint (leaves only;
                     kept for tools that read just the policy)
  checkpoints/       see `roxie.checkpoint`; each checkpoint has items
                       agent   the recipe's state (params, target networks,
                               optimiser states, temperatures/duals, noise
                               and normaliser state, update counters)
                       loop    the rest of the LoopState (env state, episode
                               statistics, the loop's PRNG key, iteration),
                               the runner's evaluation key and, on the native
                               CPU backend, the host physics state
                       replay  the replay buffer (unless save_replay=False)
                     and in meta.json the runner's counters (env steps,
                     next evaluation, last evaluation, CSV rows, wall time)
  tensorboard/       event files, with tensorboard=True
  .lock              held (flock) while a process trains the run

Multi-process jobs. Process 0 alone writes the run directory; the other
processes write nothing. Their environment and replay state is sharded
across the processes and is not gathered, so such a run's checkpoints hold
the (replicated) agent state only, config.json says so (`num_processes`,
`checkpoint_contents`), and it cannot be resumed (`resume` says so); its
policy can be evaluated, played and exported like any other.

Exact resume. With the replay saved, a resumed run is bit-exact with an
uninterrupted one: the compiled program is the same (iterations per call is
part of config.json), every array it carries is restored, the native backend's
host physics is restored with `env.set_host_state`, and the runner's own
randomness (evaluation keys) and counters are restored. Rows of metrics.csv
written after the restored checkpoint (a process killed between an
evaluation and its checkpoint) are dropped on resume; the resumed run writes
them again, identical except wall_time and sps. Rows up to the checkpoint are
kept as they are (metrics.csv is appended to across resumes), unless the
file was deleted, emptied or cut short: each checkpoint stores a copy of it
(`file.metrics.csv`), which a resume restores. A run stopped before its
first checkpoint was complete resumes from step 0 with its saved seed and
config (its old metrics.csv is kept aside as metrics.csv.before-restart).

Iterations. The loop advances in whole iterations of
`env_steps_per_iteration` env steps (num_envs x steps per iteration x action
repeat): eval_every is rounded up to whole iterations when the run is
created, and the total is rounded up when training (both with a note). A
call ends at the next evaluation point or at the total when either is
nearer than `iterations_per_call` iterations, with a shorter program
(compiled once), so both fall exactly where they should, and a resumed run
makes the same calls.

Faults. After each call one reduction over the agent state checks that it
is finite; if not, a metrics row records it (`nonfinite_params`) and
`TrainingFault` is raised without evaluating or checkpointing the poisoned
state, so the last checkpoint stays the latest good one. Every row also
counts the action dims the env clipped (outside [-1, 1] or NaN) and the envs
reset after their physics diverged since the previous row. A failed write
(a full disk) raises an OSError; the checkpoint being written is abandoned
and the previous one is intact.

Resolution schedules. A run from pixels may change its image resolution as
it trains (low resolution early, higher later): config.json's
`resolution_schedule` is [[env steps, height, width], ...], the first at 0
steps, strictly increasing (`parse_resolution_schedule`; `roxie train
--resolution-schedule 32@0,48@40000,64@80000`); `env_options['pixels']`
holds the first stage's size. It needs an encoder whose parameters fit any
resolution (`encoder_pooling` 'mean' or 'spatial_softmax', see
`roxie.networks.PixelEncoder`). A stage starts at the first call boundary at
or after its threshold (calls are `iterations_per_call` iterations, at most
`eval_every` env steps): the runner builds the envs of the new size,
rebuilds the recipe and the compiled loop (a recompile), keeps the agent
state (its shapes are checked), converts the replay (every stored frame
resized, `roxie.buffers.replay_resize`) so that learning goes on from the
same data, and carries the training envs over: their episodes continue,
with the frames of their current stacks resized the same way (nothing is
reset, so episode returns and the replay's episodes stay whole). The frames
rendered after the boundary have the new size. Evaluations use the
resolution the agent is training at. Each checkpoint records the stage of
the state it holds (`stage` in the runner state); a resume builds that stage
before restoring, then switches if the env steps call for a later one, so a
resumed run stays exact. `roxie eval --run` and `roxie export` use the
resolution of the latest checkpoint's stage (the final one of a finished
run).

Stopping. SIGINT (Ctrl-C) or SIGTERM during training lets the compiled call
in progress finish, writes a checkpoint at that iteration boundary (unless
one was just written there) and raises `Interrupted` (`roxie train` prints
where it stopped and exits 130 or 143). No evaluation row is added for the
stop, so a stopped and resumed run stays bit-exact with an uninterrupted
one. A second signal raises `Interrupted` at once, mid-checkpoint if need
be; the atomic write then leaves the previous checkpoint as it was.
`roxie train` records a signal that arrives before training started
(while importing, building or tracing; see `set_early_signals`) and stops
as training starts, instead of letting Python raise KeyboardInterrupt
somewhere it may be swallowed (an XLA garbage-collector callback).
"""


# The modules, lowest first (docs/ARCHITECTURE.md): errors, files, config,
# signals, logging, health, programs, schedules, checkpoints, trainer,
# population.
# Every name callers imported when roxie.run was one module is here.
# pylint: disable=unused-import,g-bad-import-order
from roxie.run.errors import (
    RunError,
    TrainingFault,
    Interrupted,
)
from roxie.run.files import (
    STATE_FILE,
    CONFIG_FILE,
    METRICS_FILE,
    POPULATION_FILE,
    TENSORBOARD_DIR,
    LOCK_FILE,
    RESTART_SUFFIX,
    DEFAULT_KEEP_CHECKPOINTS,
    save_agent_state,
    load_agent_state,
    _run_lock,
    _write_json,
    _count_rows,
    _saved_total,
)
from roxie.run.config import (
    DEFAULT_TASK,
    _MAX_ITERATIONS_PER_CALL,
    RUN_FIELDS,
    _agent_module,
    _agent_name,
    resolve_config,
    load_run,
    RunConfig,
    as_run_config,
    load_run_config,
    new_run_config,
    RUN_SETTINGS,
    split_overrides,
    run_defaults,
    resolve_run_defaults,
    config_json,
    run_differences,
    _action_repeat,
    OBS_CHOICES,
    pixel_options,
    env_kwargs,
    pixel_agents,
    check_pixel_agent,
    pixel_defaults,
    whole_iterations,
    _rounding_notes,
    _new_run_meta,
    AGENT_ONLY,
    check_resumable,
    _check_positive,
)
from roxie.run.schedules import (
    _parse_size,
    parse_resolution_schedule,
    check_resolution_schedule,
    schedule_stage,
    stage_meta,
    stage_at,
    at_stage,
    trained_run,
    check_schedule_pooling,
    _checkpoint_stage,
    trained_env_options,
    _shape_differences,
    _switch_stage,
)
from roxie.run.signals import (
    _signal_name,
    _early_signals,
    set_early_signals,
    StopRequest,
    _StopRequest,
)
from roxie.run.logging import (
    _short,
    _clock,
    _Progress,
    _MetricsCsv,
    check_tensorboard,
    _TensorBoard,
    _warn,
    Logger,
)
from roxie.run.health import (
    _is_float,
    _finite_flags,
    nonfinite_leaves,
    _nonfinite_message,
    _count_inexact,
    _host_errors,
    HEALTH_COLUMNS,
    _health,
)
from roxie.run.programs import (
    Programs,
    _Programs,
    ProgramCache,
    DEFAULT_PROGRAMS,
    build_programs,
    _programs,
    _check_buildable,
)
from roxie.run.checkpoints import (
    _Runner,
    _items,
    _templates,
    _check_identity,
    _load_checkpoint,
    _save_checkpoint,
    load_run_agent_state,
    older_checkpoint_hint,
)
from roxie.run.trainer import (
    RunResult,
    train,
    resume,
    _train,
    _stop_nonfinite,
    _stop_with_checkpoint,
    _nan,
    final_line,
    evaluate_run,
)
from roxie.run.population import (
    PopulationResult,
    member_names,
    parse_seeds,
    parse_sweep,
    population_dirs,
    resume_population,
    train_population,
)
