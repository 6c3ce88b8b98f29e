"""The data-parallel loop across processes: `jax.distributed` on localhost.

Each test launches N worker processes (this file run as a script), which
join one JAX job through `roxie.distributed.initialize` (the coordinator on a
free localhost port, gloo CPU collectives), build a mesh over every
process's CPU devices and run the same sharded compiled loop. Each reports a
digest of its replicated agent state; they must agree with each other and
with one process holding all the devices.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_sharding as ts  # pylint: disable=g-import-not-at-top,wrong-import-position


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _launch(num_processes: int, local_devices: int, scenario: str,
            timeout: float = 240) -> list:
  port = _free_port()
  env = ts.worker_environ(local_devices)
  procs = [subprocess.Popen(
      [sys.executable, os.path.abspath(__file__), scenario, str(port),
       str(num_processes), str(i), str(local_devices)],
      env=env, cwd=ts.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True) for i in range(num_processes)]
  deadline = time.time() + timeout
  outs = []
  try:
    for p in procs:
      out, err = p.communicate(timeout=max(1.0, deadline - time.time()))
      outs.append((p.returncode, out, err))
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  for i, (rc, out, err) in enumerate(outs):
    assert rc == 0, f'process {i} failed:\n{out[-3000:]}\n{err[-6000:]}'
  return [ts.parse_result(out) for _, out, _ in outs]


# ~36 s (three processes); the fast suite keeps the two-process roxie train.
@pytest.mark.slow
def test_two_processes_stay_in_sync():
  # Two processes of two CPU devices each: a 4-device mesh, two shards (and
  # two native simulation batches) per process, gloo between processes.
  local_devices = 2
  results = _launch(2, local_devices, 'loop')
  a, b = results
  assert a['process_count'] == b['process_count'] == 2
  assert a['global_devices'] == b['global_devices'] == 2 * local_devices
  assert a['local_devices'] == local_devices
  for name in ('integrator', 'native'):
    # Identical replicated parameters in both processes, after learning.
    assert a[name]['agent'] == b[name]['agent'], (a, b)
    assert a[name]['updates'] == 2 * 20 - 1
    assert a[name]['moved'] > 1e-3
    # Episode statistics are global (all processes' envs): the same in both.
    assert a[name]['completed'] == b[name]['completed'] > 0
  # Each process drives only its own shards' native simulations.
  assert a['native']['own_batches'] == local_devices
  # The same job in one process holding all four devices: the same
  # parameters, up to the summation order of the all-reduce (in-process vs
  # gloo).
  single = _launch(1, 2 * local_devices, 'integrator')[0]
  np.testing.assert_allclose(single['integrator']['params'],
                             a['integrator']['params'], rtol=1e-5, atol=1e-6)
  assert single['integrator']['completed'] == a['integrator']['completed']


def test_two_process_train_writes_one_run_folder(tmp_path, capsys):
  """`roxie train` in a 2-process job: process 0 alone writes the run."""
  from roxie import checkpoint as ckpt  # pylint: disable=g-import-not-at-top
  from roxie import cli  # pylint: disable=g-import-not-at-top
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
  out = tmp_path / 'run'
  port = _free_port()
  argv = [sys.executable, '-m', 'roxie.cli', 'train', '--agent', 'sac',
          '--task', 'PendulumSwingup', '--num-envs', '2', '--steps', '160',
          '--eval-every', '40', '--eval-episodes', '2', '--episode-length',
          '20', '--out', str(out), '--quiet',
          '--coordinator', f'127.0.0.1:{port}', '--num-processes', '2']
  for setting in ('hidden_sizes=8', 'batch_size=8', 'warmup_steps=20',
                  'replay_capacity=64'):
    argv += ['--set', setting]
  procs = [subprocess.Popen(argv + ['--process-id', str(i)],
                            env=ts.worker_environ(1), cwd=ts.ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True) for i in range(2)]
  outs = []
  try:
    for p in procs:
      outs.append(p.communicate(timeout=600))
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  for i, (p, (stdout, stderr)) in enumerate(zip(procs, outs)):
    assert p.returncode == 0, f'process {i}:\n{stdout}\n{stderr[-6000:]}'
  (out0, err0), (out1, _) = outs
  assert f'run saved to {out}' in out0 and 'run saved to' not in out1
  assert 'final eval_return=' in out0 and 'final eval_return=' not in out1
  assert 'cannot be resumed' in err0, err0

  # One run folder, written once: one row per evaluation, no duplicates.
  meta = json.loads((out / run_lib.CONFIG_FILE).read_text())
  assert meta['num_processes'] == 2 and meta['num_devices'] == 2
  assert meta['checkpoint_contents'] == 'agent'
  rows = (out / run_lib.METRICS_FILE).read_text().splitlines()
  assert rows[0].startswith('env_steps,')
  assert [int(r.split(',')[0]) for r in rows[1:]] == [40, 80, 120, 160]
  assert ckpt.list_steps(str(out))[-1] == 160
  latest = ckpt.latest(str(out))
  assert ckpt.read_meta(latest)['meta']['contents'] == 'agent'
  assert ckpt.read_meta(latest)['meta']['replay_saved'] is False
  assert list(ckpt.read(latest)) == ['agent']
  assert not [n for n in os.listdir(ckpt.checkpoint_dir(str(out)))
              if n.startswith('.tmp-')]

  # The policy is usable; resuming is refused with a clear message.
  result = run_lib.evaluate_run(str(out), episodes=2)
  assert result.returns.shape == (2,)
  assert cli.main(['train', '--resume', str(out)]) == 2
  err = capsys.readouterr().err
  assert 'multi-process job (2 processes)' in err and 'cannot be resumed' in err
  assert ckpt.list_steps(str(out))[-1] == 160  # Nothing changed.


# -- worker --------------------------------------------------------------------


def _loop(env, recipe, mesh, iterations=20, calls=2):
  import jax  # pylint: disable=g-import-not-at-top
  from roxie import distributed, loops  # pylint: disable=g-import-not-at-top
  init, run = loops.make_compiled_loop(recipe, env, iterations=iterations,
                                       mesh=mesh)
  state = init(jax.random.PRNGKey(7))
  start = distributed.local_copy(state.agent)
  start = jax.tree.map(lambda x: x.copy(), start)
  updates = completed = 0
  for _ in range(calls):
    state, out = run(state)
    out = jax.device_get(distributed.local_copy(out))
    updates += int(out.updates)
    completed += int(out.stats.completed)
  params = [float(v) for v in np.concatenate([
      np.ravel(x) for x in jax.tree.leaves(
          distributed.local_copy(state.agent['model']))])]
  return {'agent': ts.digest(state.agent), 'params': params,
          'updates': updates,
          'completed': completed,
          'moved': ts.max_diff(start, state.agent)}


def _log(msg):
  print(f'[{time.time() - _T0:6.1f}s] {msg}', file=sys.stderr, flush=True)


_T0 = time.time()


def worker(argv):
  scenario, port, num_processes, process_id, local_devices = argv
  num_processes, local_devices = int(num_processes), int(local_devices)
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update('jax_num_cpu_devices', local_devices)
  from roxie import distributed  # pylint: disable=g-import-not-at-top
  if num_processes > 1:
    distributed.initialize(f'127.0.0.1:{port}', num_processes,
                           int(process_id))
  _log('initialized')
  jax.config.update('jax_numpy_rank_promotion', 'raise')
  assert scenario in ('loop', 'integrator')
  mesh = distributed.make_mesh()
  result = {'process_count': jax.process_count(),
            'global_devices': len(jax.devices()),
            'local_devices': len(jax.local_devices())}
  d = len(jax.devices())
  env = ts.Integrator(num_envs=2 * d)
  recipe = ts.linear_recipe(env.spec, batch_size=2 * d, capacity=64 * d)
  result['integrator'] = _loop(env, recipe, mesh)
  _log('integrator loop done')
  if scenario == 'loop':
    _native(result, mesh, d)
  print(ts.RESULT + json.dumps(result), flush=True)
  if num_processes > 1:
    jax.distributed.shutdown()
  _log('shut down')


def _native(result, mesh, d):
  from roxie import distributed  # pylint: disable=g-import-not-at-top
  native = distributed.make_sharded_env(
      'PendulumSwingup', mesh=mesh, num_envs=2 * d, episode_length=10)
  recipe = ts.linear_recipe(native.spec, batch_size=2 * d, capacity=64 * d)
  result['native'] = _loop(native, recipe, mesh)
  result['native']['own_batches'] = len(native.local.physics.parts)
  _log('native loop done')


if __name__ == '__main__':
  worker(sys.argv[1:])
