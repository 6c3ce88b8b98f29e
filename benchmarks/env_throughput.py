"""Environment throughput: raw mujoco.batch vs roxie's backends in a jitted scan.

For each task and env count, prints env steps/s of
  raw      mujoco.batch in a Python loop: write ctrl, step(nstep, mjSTAGE_VEL)
           (nothing else: the strictest baseline);
  native   roxie.envs.make(task, backend='cpu') stepped in a jitted lax.scan
           (actions drawn in JAX beforehand, [T, B, A]), full env semantics:
           clipping, obs, reward, auto-reset;
  ratio    native / raw (target >= 0.95), by wall time; 'cpu-t ratio' the
           same by process CPU time (less disturbed by other load);
  profile  per env step (medians), where native's time goes: batch.step
           inside the callback, the rest of the callback (copies, checks), and
           between callbacks (XLA's work: action mapping, task functions,
           resets; plus entering/leaving Python); 'prof ratio' is
           physics / (physics + cb + between), the in-loop efficiency within
           one run, which other load on a shared machine disturbs least;
  own us   roxie's own work per env step, by process CPU time (best of
           --repeats): the same scan with batch.step replaced by a no-op, so
           the callback's crossing and copies, the host checks and XLA's
           action mapping, task functions and reset logic, without physics;
  mjx      roxie.envs.make(task, backend='mjx') in the same scan, with its
           compile time (long for contact-rich models on CPU: 45-85 s);
           one pair of columns per `--impl` ('jax', the default, and/or
           'warp': MuJoCo Warp physics, on Warp's CPU device here; its
           compile column includes building Warp's kernels, cached on disk
           after the first run).

`--callbacks` instead compares host-callback mechanisms on a bare batch.step
(io_callback, ordered io_callback, pure_callback, buffer_callback) against the
same raw loop; roxie uses buffer_callback (see roxie/envs/native.py).

Timings are the best of `--repeats` runs (the machine is shared: the best
run is the least disturbed one); physics and callbacks are still sensitive to
other load on the cores, so compare numbers from the same invocation.

  python benchmarks/env_throughput.py --quick
  python benchmarks/env_throughput.py --tasks CheetahRun --envs 64 --impl jax,warp
  python benchmarks/env_throughput.py --tasks CheetahRun,HumanoidWalk --envs 64,256
  python benchmarks/env_throughput.py --callbacks --tasks PendulumSwingup,CheetahRun
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp
import mujoco
import mujoco.batch
import numpy as np

import roxie.envs as envs
from roxie.envs import common
from roxie.envs.task import Task, dm_control_model

DEFAULT_TASKS = ('PendulumSwingup', 'CartpoleSwingup', 'CheetahRun',
                 'HumanoidWalk')
_VEL = mujoco.mjtStage.mjSTAGE_VEL.value


def _standin(name: str) -> Task:
  """A task on the suite's model, for tasks not (yet) registered."""
  domain = {'CheetahRun': 'cheetah', 'HumanoidWalk': 'humanoid'}[name]
  model = dm_control_model(domain)
  timestep = {'cheetah': 0.01, 'humanoid': 0.025}[domain]
  def init(key, c):
    del key
    return jnp.asarray(c['qpos0']), jnp.zeros(c['nv']), jnp.zeros((0,))
  return Task(
      name=name + 'StandIn', domain=domain, dmc_task='standin',
      load_model=lambda: model, control_timestep=timestep,
      episode_length=1000, fields=('qpos', 'qvel', 'xpos', 'xmat'),
      consts=lambda m: {'qpos0': np.asarray(m.qpos0, np.float32),
                        'nv': m.nv},
      init=init,
      observe=lambda v, t, c: {'qpos': v['qpos'], 'qvel': v['qvel'],
                               'xmat': v['xmat'][1]},
      reward=lambda v, t, c: v['qvel'][0])


def _task(name: str):
  try:
    return envs.get_task(name)
  except KeyError:
    print(f'  ({name} is not registered: using a stand-in task on its model)')
    return _standin(name)


def _load():
  return ', '.join(f'{x:.2f}' for x in os.getloadavg())


def _best_time(fn, repeats):
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return min(times)


def _raw_runner(task, num_envs, nthread, steps, seed=0,
                physics='dm_control'):
  """A function that runs `steps` env steps of the bare mujoco.batch loop."""
  model = common.prepare_model(task, physics)
  n = task.n_substeps(model)
  batch = mujoco.batch.Batch(model, num_envs, nthread, persistent=True)
  batch.reset()
  ctrl = batch.bind('ctrl')
  lo, hi = model.actuator_ctrlrange.T
  actions = np.random.default_rng(seed).uniform(lo, hi,
                                                (steps, num_envs, model.nu))
  def run():
    for k in range(steps):
      ctrl[...] = actions[k]
      batch.step(nstep=n, stage=_VEL)
  run()
  return run


def _raw(task, num_envs, nthread, steps, repeats, seed=0,
         physics='dm_control'):
  """Seconds per env step of the bare mujoco.batch loop."""
  run = _raw_runner(task, num_envs, nthread, steps, seed, physics)
  return _best_time(run, repeats) / steps


def _interleaved(fns, repeats, cpu=False):
  """Best time of each function, run in turns so that all see the same load.

  With cpu=True, also the best process CPU time of each (all threads): on a
  shared machine it is not inflated by waiting for a core, though it counts
  any spinning threads.
  """
  best = [float('inf')] * len(fns)
  best_cpu = [float('inf')] * len(fns)
  for _ in range(repeats):
    for i, fn in enumerate(fns):
      t0, c0 = time.perf_counter(), time.process_time()
      fn()
      best[i] = min(best[i], time.perf_counter() - t0)
      best_cpu[i] = min(best_cpu[i], time.process_time() - c0)
  return (best, best_cpu) if cpu else best


def _calibrate_steps(task, num_envs, nthread, budget_s, physics='dm_control'):
  per_step = _raw(task, num_envs, nthread, 10, 1, physics=physics)
  return int(np.clip(budget_s / per_step, 10, 5000))


def _scan(env, steps, seed=0):
  actions = jax.random.uniform(jax.random.key(seed),
                               (steps, env.num_envs, env.spec.action_size),
                               minval=-1.0, maxval=1.0)
  def run(state, actions):
    def body(state, a):
      state, ts = env.step(state, a)
      return state, ts.reward
    state, rewards = jax.lax.scan(body, state, actions)
    return state, rewards.sum()
  run = jax.jit(run)
  state = jax.jit(env.reset)(jax.random.key(seed))
  t0 = time.perf_counter()
  compiled = run.lower(state, actions).compile()
  compile_s = time.perf_counter() - t0
  box = [state]
  def once():
    box[0], total = compiled(box[0], actions)
    jax.block_until_ready(total)
  once()
  return once, compile_s


def _profile(env, steps):
  """Median us per env step: (batch.step, rest of callback, XLA between)."""
  physics = env.physics
  records = []
  real = physics.batch.step
  acc = [0.0]
  def timed_step(*args, **kwargs):
    t0 = time.perf_counter()
    try:
      return real(*args, **kwargs)
    finally:
      acc[0] = time.perf_counter() - t0
  hook = physics.step_hook
  def on_step(t_enter, t_exit):
    records.append((t_enter, t_exit, acc[0]))
  physics.batch.step = timed_step
  physics.step_hook = on_step
  try:
    once, _ = _scan(env, steps, seed=1)
    records.clear()
    once()
  finally:
    physics.batch.step = real
    physics.step_hook = hook
  r = np.asarray(records)
  in_batch = np.median(r[:, 2])
  rest = np.median(r[:, 1] - r[:, 0]) - in_batch
  between = np.median(r[1:, 0] - r[:-1, 1])
  return 1e6 * np.array([in_batch, rest, between])


def _own_work(env, steps, repeats):
  """CPU us per env step of the scan with the physics step a no-op."""
  physics = env.physics
  real = physics.batch.step
  physics.batch.step = lambda *args, **kwargs: None
  try:
    once, _ = _scan(env, steps, seed=2)
    best = float('inf')
    for _ in range(repeats):
      c0 = time.process_time()
      once()
      best = min(best, time.process_time() - c0)
  finally:
    physics.batch.step = real
  return 1e6 * best / steps


def throughput(args):
  mjx_heads = ''.join(f' {"mjx-" + i + "/s":>10s} {i + " jit s":>10s}'
                      for i in args.impl)
  print(f'{"task":18s} {"B":>4s} {"raw/s":>10s} {"native/s":>10s} '
        f'{"ratio":>6s} {"cpu-t ratio":>11s} {"physics|cb|xla us":>19s} '
        f'{"prof ratio":>10s} {"own us":>6s} '
        f'{"cpu jit s":>9s}{mjx_heads}')
  for name in args.tasks:
    task = _task(name)
    heavy_mjx = name.startswith(('Cheetah', 'Humanoid', 'Walker', 'Hopper',
                                 'Quadruped', 'Fish', 'Swimmer'))
    for num_envs in args.envs:
      steps = _calibrate_steps(task, num_envs, args.nthread, args.budget,
                               args.physics)
      raw_run = _raw_runner(task, num_envs, args.nthread, steps,
                            physics=args.physics)
      env = envs.make(task, backend='cpu', num_envs=num_envs,
                      nthread=args.nthread, physics=args.physics)
      once, cpu_compile = _scan(env, steps)
      (t_raw, t_native), (c_raw, c_native) = _interleaved(
          [raw_run, once], args.repeats, cpu=True)
      raw = num_envs * steps / t_raw
      native = num_envs * steps / t_native
      prof = _profile(env, steps)
      own = _own_work(env, steps, args.repeats)
      mjx_cols = ''
      for impl in args.impl:
        mjx_rate, mjx_compile = float('nan'), float('nan')
        if not args.no_mjx and not (args.quick and heavy_mjx):
          mjx_env = envs.make(task, backend='mjx', num_envs=num_envs,
                              impl=impl, physics=args.physics)
          mjx_steps = max(5, steps // 20) if heavy_mjx else steps
          once, mjx_compile = _scan(mjx_env, mjx_steps)
          mjx_rate = num_envs * mjx_steps / _best_time(
              once, max(1, args.repeats // 2))
        mjx_cols += f' {mjx_rate:10,.0f} {mjx_compile:10.1f}'
      prof_s = '{:5.0f}|{:4.0f}|{:4.0f}'.format(*prof)
      print(f'{name:18s} {num_envs:4d} {raw:10,.0f} {native:10,.0f} '
            f'{native / raw:6.2f} {c_raw / c_native:11.2f} {prof_s:>19s} '
            f'{prof[0] / prof.sum():10.2f} {own:6.1f} '
            f'{cpu_compile:9.1f}{mjx_cols}',
            flush=True)


def compare_callbacks(args):
  """Bare batch.step through each callback mechanism vs the raw loop."""
  from jax.experimental import buffer_callback as bcb  # pylint: disable=g-import-not-at-top
  print(f'{"task":18s} {"B":>4s} {"mechanism":20s} {"us/step":>8s} '
        f'{"overhead us":>11s} {"ratio":>6s}')
  for name in args.tasks:
    task = _task(name)
    model = common.prepare_model(task)
    n = task.n_substeps(model)
    fields = tuple(f for f in task.fields if f != 'ctrl')
    for num_envs in args.envs:
      steps = _calibrate_steps(task, num_envs, args.nthread, args.budget)
      raw_run = _raw_runner(task, num_envs, args.nthread, steps)
      batch = mujoco.batch.Batch(model, num_envs, args.nthread,
                                 persistent=True)
      batch.reset()
      ctrl = batch.bind('ctrl')
      bound = {f: batch.bind(f) for f in fields}
      view = {f: jax.ShapeDtypeStruct(bound[f].shape, jnp.float32)
              for f in fields}
      token = jax.ShapeDtypeStruct((), jnp.int32)

      def host(tok, c):
        np.copyto(ctrl, np.asarray(c), casting='same_kind')
        batch.step(nstep=n, stage=_VEL)
        return (np.asarray(tok), {f: bound[f].astype(np.float32)
                                  for f in fields})

      def host_buffers(ctx, out, tok, c):
        del ctx
        np.copyto(ctrl, np.asarray(c), casting='same_kind')
        batch.step(nstep=n, stage=_VEL)
        np.asarray(out[0])[...] = np.asarray(tok)
        for f in fields:
          np.copyto(np.asarray(out[1][f]), bound[f], casting='same_kind')

      mechanisms = {
          'io_callback': lambda t, c: jax.experimental.io_callback(
              host, (token, view), t, c),
          'io_callback ordered': lambda t, c: jax.experimental.io_callback(
              host, (token, view), t, c, ordered=True),
          'pure_callback': lambda t, c: jax.pure_callback(
              host, (token, view), t, c),
          'buffer_callback': bcb.buffer_callback(
              host_buffers, (token, view), has_side_effect=True),
      }
      actions = jax.random.uniform(jax.random.key(0),
                                   (steps, num_envs, model.nu), minval=-1,
                                   maxval=1)
      runs = [raw_run]
      for mech, call in mechanisms.items():
        def body(carry, a, call=call):
          tok, acc = carry
          tok, v = call(tok, a)
          return (tok, acc + v[fields[0]][0, 0]), None
        run = jax.jit(lambda c, xs, body=body: jax.lax.scan(body, c, xs)[0])
        carry = (jnp.int32(0), jnp.float32(0))
        jax.block_until_ready(run(carry, actions))
        runs.append(lambda run=run, carry=carry: jax.block_until_ready(
            run(carry, actions)))
      best = _interleaved(runs, args.repeats)
      raw = best[0] / steps
      print(f'{name:18s} {num_envs:4d} {"raw loop":20s} {raw * 1e6:8.0f}')
      for mech, t in zip(mechanisms, best[1:]):
        per = t / steps
        print(f'{name:18s} {num_envs:4d} {mech:20s} {per * 1e6:8.0f} '
              f'{(per - raw) * 1e6:11.0f} {raw / per:6.2f}', flush=True)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--tasks', default=','.join(DEFAULT_TASKS))
  parser.add_argument('--envs', default='64,256')
  parser.add_argument('--nthread', type=int, default=os.cpu_count())
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--budget', type=float, default=0.3,
                      help='seconds of raw stepping per timing run')
  parser.add_argument('--quick', action='store_true',
                      help='small tasks, 64 envs, no MJX on contact-rich ones')
  parser.add_argument('--no-mjx', action='store_true')
  parser.add_argument('--impl', default='jax',
                      help="MJX impls to time, comma-separated: 'jax', "
                      "'warp' (needs warp-lang) or both")
  parser.add_argument('--callbacks', action='store_true',
                      help='compare host-callback mechanisms instead')
  parser.add_argument('--physics', default='dm_control',
                      choices=('dm_control', 'playground'),
                      help='the solver preset of the throughput table '
                      '(roxie.envs.presets); dm_control is the default')
  args = parser.parse_args(argv)
  if args.quick:
    if args.tasks == ','.join(DEFAULT_TASKS):
      args.tasks = 'PendulumSwingup,CartpoleSwingup'
    if args.envs == '64,256':
      args.envs = '64'
    args.repeats = min(args.repeats, 3)
  args.tasks = [t for t in args.tasks.split(',') if t]
  args.envs = [int(b) for b in args.envs.split(',') if b]
  args.impl = [i for i in args.impl.split(',') if i]
  bad = [i for i in args.impl if i not in ('jax', 'warp')]
  if bad:
    parser.error(f"--impl takes 'jax' and/or 'warp', got {bad[0]!r}")
  print(f'jax {jax.__version__}, mujoco {mujoco.__version__}, '
        f'{os.cpu_count()} cores, nthread={args.nthread}, physics='
        f'{args.physics}, load average '
        f'(1/5/15 min) {_load()}', flush=True)
  if args.callbacks:
    compare_callbacks(args)
  else:
    throughput(args)
  print(f'load average at end: {_load()}')


if __name__ == '__main__':
  sys.exit(main())
