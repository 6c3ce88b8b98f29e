"""roxie against Brax's own trainers, same machine, same run.

roxie's PPO and SAC (compiled loop; native CPU backend and MJX backend) and
Brax's `brax.training.agents.ppo.train` / `sac.train` on mujoco_playground's
matching DM Control task (CartpoleSwingup by default; its MJX physics with
impl 'jax' on a CPU), at matched hyperparameters (below), one after the other
in this invocation. For each run it prints

  sps          steady env steps/s: the median rate of the chunks between
               evaluations from the third chunk on (the first two hold the
               compiles; the periodic evaluations are included: both sides
               evaluate 10 episodes, deterministically, at the same step
               counts); needs --evals >= 4, better 6 or more;
  sps/cpu-s    the same per second of the process's CPU time (all its
               threads), which other processes' load inflates least;
  brax sps     Brax's own `training/sps` (excludes its evaluations), for
               reference;
  to thr s     wall-clock from the start of the call (env construction and
               compilation included) to the first evaluation after step 0
               whose mean return reaches `--threshold`;
  final        the last evaluation's mean return;

and the ratios roxie / Brax, in wall-clock and per CPU-second, against
issue 15's targets (`TARGETS`: PPO >= 1.5x with roxie's native backend and
>= 1.0x with roxie on MJX against Brax on MJX; SAC >= 1.2x native; on the
contact-rich tasks of `CONTACT_RICH`, e.g. `--task CheetahRun`, roxie
native >= 10x Brax on MJX for either agent).

Brax and mujoco_playground are not roxie dependencies. They are looked for
(1) in this interpreter, else (2) in the interpreter named by `--brax-python`
or $ROXIE_BRAX_PYTHON (default /tmp/brax-venv/bin/python if present), a
separate environment with the same jax and mujoco versions, run as a
subprocess of this script (`--brax-worker`). If neither works, the script
says what is missing and exits 0 after roxie's own figures. One way to make
that environment:

  python3 -m venv /tmp/brax-venv
  /tmp/brax-venv/bin/pip install jax==0.10.2 jaxlib==0.10.2 mujoco==3.17.0 \\
      mujoco-mjx==3.17.0 brax playground

Matched settings (2-core CPU scale; both APIs can express them):
  PPO: 16 envs x 64-step rollouts (Brax: batch_size 2 x num_minibatches 8 =
       16 envs, unroll_length 64, so one unroll per update as in roxie), 10
       epochs x 8 minibatches of 128 steps, lr 1e-3, clip 0.2, GAE lambda
       0.95, discount 0.99, entropy 0.002, grad-norm clip 0.5, observation
       normalisation, no reward scaling, MLPs (64, 64) tanh for policy and
       value, a Gaussian policy with a state-independent learned log std
       (initial std exp(-0.5)), time-limit truncations bootstrapped.
       Left different: roxie clips each network's gradients separately and
       uses two Adam optimisers (Brax one over both).
  SAC: 8 envs, 4 gradient steps per env step of all envs (2 env steps per
       update), batch 256, replay 500k, warm-up 5,000 uniform-random steps
       (Brax: min_replay_size), lr 3e-4 (actor, critic and temperature),
       tau 0.005, discount 0.99, initial temperature 1, target entropy
       -0.5 * action size (Brax's fixed choice), MLPs (256, 256) relu with
       LayerNorm in both networks, tanh-Gaussian policy with a
       state-dependent std, no observation normalisation.

Physics: by default roxie runs mujoco_playground's solver options
(`--physics playground`, the physics Brax's MJX runs), so both sides step
the same physics; `--physics dm_control` runs roxie's own default (RK4 for
cartpole, Newton with up to 100 iterations), heavier. The header says which.
Until 2026-12-02 the default was dm_control.

  python benchmarks/vs_brax.py --quick
  python benchmarks/vs_brax.py --quick --physics dm_control
  python benchmarks/vs_brax.py --agents ppo --ppo-steps 2000000 --threshold 700
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness as H  # pylint: disable=g-import-not-at-top

DEFAULT_BRAX_PYTHON = '/tmp/brax-venv/bin/python'
EVAL_EPISODES = 10

PPO = dict(num_envs=16, rollout_length=64, num_epochs=10, num_minibatches=8,
           learning_rate=1e-3, clip_epsilon=0.2, gae_lambda=0.95,
           discount=0.99, entropy_coef=0.002, max_grad_norm=0.5,
           hidden_sizes=(64, 64), init_log_std=-0.5)
SAC = dict(num_envs=8, updates_per_iteration=4, steps_per_iteration=1,
           batch_size=256, replay_capacity=500_000, warmup_steps=5_000,
           actor_lr=3e-4, critic_lr=3e-4, alpha_lr=3e-4, tau=0.005,
           discount=0.99, init_alpha=1.0, hidden_sizes=(256, 256),
           layer_norm=True, n_step=1, action_repeat=1)


# roxie / Brax ratio targets per agent and roxie backend (issue 15).
TARGETS = {'ppo': {'cpu': 1.5, 'mjx': 1.0}, 'sac': {'cpu': 1.2, 'mjx': 1.2}}
# On contact-rich tasks MJX on a CPU pays for its contact pipeline (batched
# dense collision and constraint solves) where native MuJoCo's sparse C code
# does not: roxie's native backend against Brax on MJX, >= 10x (issue 15);
# roxie on MJX is reported without a target there.
CONTACT_RICH = ('CheetahRun', 'WalkerWalk', 'WalkerRun', 'WalkerStand',
                'HopperStand', 'HopperHop', 'HumanoidStand', 'HumanoidWalk',
                'HumanoidRun', 'QuadrupedWalk', 'QuadrupedRun', 'FingerSpin',
                'BallInCup')
CONTACT_TARGET = 10.0


def targets(agent: str, task: str) -> Dict[str, float]:
  """{roxie backend: roxie / Brax target} for `agent` on `task`."""
  if task in CONTACT_RICH:
    return {'cpu': CONTACT_TARGET}
  return TARGETS[agent]


def _first_reaching(records, threshold):
  """(wall s, steps) of the first evaluation after training began that
  reaches the threshold (an untrained policy's score says nothing about
  training speed)."""
  for steps, wall, ret in records:
    if steps > 0 and ret >= threshold:
      return wall, steps
  return float('nan'), None


def _chunk_rates(records):
  """Env steps/s of each chunk between consecutive evaluations."""
  return [(s1 - s0) / (w1 - w0) for (s0, w0, _), (s1, w1, _) in
          zip(records[:-1], records[1:]) if w1 > w0]


def _steady_sps(records):
  """Median env steps/s of the chunks from the third on.

  Both sides compile their training program in the first chunk (after the
  evaluation at step 0), and Brax compiles again in its second (its pmapped
  step meets inputs placed differently from the first call's), so those two
  chunks are left out; each chunk includes one evaluation of 10 episodes.
  """
  rates = _chunk_rates(records)
  if len(rates) < 3:
    return float('nan')
  rates = sorted(rates[2:])
  mid = len(rates) // 2
  return rates[mid] if len(rates) % 2 else 0.5 * (rates[mid - 1] + rates[mid])


# ----------------------------------------------------------------------------
# roxie: a small driver around the compiled loop, evaluating where Brax does.
# ----------------------------------------------------------------------------

def roxie_setup(agent: str, backend: str, task: str, settings: Dict[str, Any],
                physics: str = 'dm_control'):
  """(recipe, env, eval_env, env steps per iteration) at matched settings.

  The training env has `settings['num_envs']` envs, the evaluation env one
  per evaluation episode; SAC's target entropy is Brax's fixed choice.
  """
  from roxie import envs, loops  # pylint: disable=g-import-not-at-top
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  from roxie import agents  # pylint: disable=g-import-not-at-top
  from roxie import run as run_lib  # pylint: disable=g-import-not-at-top
  module = agents.get_agent(agent)
  overrides = dict(settings)
  env = envs.make(task, backend=backend, num_envs=settings['num_envs'],
                  physics=physics)
  if agent == 'sac':
    overrides['target_entropy'] = -0.5 * env.spec.action_size
  cfg = config_lib.apply_overrides(module.Config(),
                                   run_lib.split_overrides(overrides)[1])
  eval_env = envs.make(task, backend=backend, num_envs=EVAL_EPISODES,
                       physics=physics)
  recipe = module.make(cfg, env.spec)
  per_iter = loops.env_steps_per_iteration(recipe, settings['num_envs'])
  return recipe, env, eval_env, per_iter


def roxie_run(agent: str, backend: str, task: str, steps: int, num_evals: int,
              settings: Dict[str, Any], seed: int = 0,
              physics: str = 'dm_control') -> Dict[str, Any]:
  import jax  # pylint: disable=g-import-not-at-top
  from roxie import loops  # pylint: disable=g-import-not-at-top
  t_start = time.perf_counter()
  recipe, env, eval_env, per_iter = roxie_setup(agent, backend, task,
                                                settings, physics)
  chunk = max(1, steps // max(1, num_evals - 1) // per_iter)
  init, run = loops.make_compiled_loop(recipe, env, iterations=chunk)
  evaluate = loops.make_evaluator(recipe, eval_env)
  key = jax.random.PRNGKey(seed)
  state = init(key)
  records, cpu = [], []
  done = 0
  for i in range(max(1, num_evals)):  # like Brax: evaluate at 0, then chunks
    if i:
      state, _ = run(state)
      done += chunk * per_iter
    result = evaluate(state.agent, jax.random.fold_in(key, done))
    ret = float(jax.device_get(result.mean))
    records.append((done, time.perf_counter() - t_start, ret))
    cpu.append(time.process_time())
  return dict(records=records, cpu=cpu,
              total_s=time.perf_counter() - t_start, steps=done)


# ----------------------------------------------------------------------------
# Brax (in whichever interpreter has it).
# ----------------------------------------------------------------------------

def patch_jax_for_brax() -> Optional[str]:
  """Brax 0.14.2 calls `jax.device_put_replicated`, which jax 0.10 removed.

  Where it is missing, installs an equivalent (stack one copy per device on a
  new leading axis; `jax.pmap` then places one slice on each device) and
  says so; returns None where nothing was needed.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  try:
    jax.device_put_replicated  # pylint: disable=pointless-statement
    return None
  except AttributeError:
    pass

  def device_put_replicated(x, devices):
    n = len(devices)
    return jax.tree.map(lambda a: jnp.stack([jnp.asarray(a)] * n), x)
  jax.device_put_replicated = device_put_replicated
  return (f'jax {jax.__version__} has no jax.device_put_replicated (Brax '
          '0.14.2 calls it in ppo/sac train); patched with an equivalent '
          'stack-per-device for this run')


def brax_run(agent: str, task: str, steps: int, num_evals: int,
             settings: Dict[str, Any], seed: int = 0) -> Dict[str, Any]:
  import functools  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  patch_note = patch_jax_for_brax()
  from mujoco_playground import registry, wrapper  # pylint: disable=g-import-not-at-top
  t_start = time.perf_counter()
  env = registry.load(task, config_overrides={'impl': 'jax'})
  eval_env = registry.load(task, config_overrides={'impl': 'jax'})
  records, brax_sps, cpu = [], [], []

  def progress(num_steps, metrics):
    records.append((int(num_steps), time.perf_counter() - t_start,
                    float(metrics['eval/episode_reward'])))
    cpu.append(time.process_time())
    if 'training/sps' in metrics:
      brax_sps.append(float(metrics['training/sps']))

  s = settings
  # Brax bootstraps time-limit ends only where the env marks them in
  # info['time_out'] (playground's cartpole does; its cheetah, walker and
  # hopper do not, and there Brax's PPO masks truncated steps instead).
  timeout_info = 'time_out' in jax.eval_shape(env.reset,
                                              jax.random.PRNGKey(0)).info
  common = dict(environment=env, eval_env=eval_env, num_timesteps=steps,
                num_evals=num_evals, num_eval_envs=EVAL_EPISODES,
                deterministic_eval=True, episode_length=1000,
                wrap_env_fn=wrapper.wrap_for_brax_training,
                progress_fn=progress, seed=seed)
  if agent == 'ppo':
    from brax.training.agents.ppo import networks as ppo_networks  # pylint: disable=g-import-not-at-top
    from brax.training.agents.ppo import train as ppo  # pylint: disable=g-import-not-at-top
    minibatch_trajectories = s['num_envs'] // s['num_minibatches']
    factory = functools.partial(
        ppo_networks.make_ppo_networks,
        policy_hidden_layer_sizes=tuple(s['hidden_sizes']),
        value_hidden_layer_sizes=tuple(s['hidden_sizes']),
        activation=jax.nn.tanh, distribution_type='normal',
        noise_std_type='log', init_noise_std=math.exp(s['init_log_std']),
        state_dependent_std=False)
    ppo.train(**common, num_envs=s['num_envs'],
              unroll_length=s['rollout_length'],
              batch_size=minibatch_trajectories,
              num_minibatches=s['num_minibatches'],
              num_updates_per_batch=s['num_epochs'],
              learning_rate=s['learning_rate'],
              entropy_cost=s['entropy_coef'], discounting=s['discount'],
              gae_lambda=s['gae_lambda'], clipping_epsilon=s['clip_epsilon'],
              max_grad_norm=s['max_grad_norm'], normalize_observations=True,
              reward_scaling=1.0, vf_loss_coefficient=1.0,
              bootstrap_on_timeout=timeout_info, network_factory=factory)
  else:
    from brax.training.agents.sac import networks as sac_networks  # pylint: disable=g-import-not-at-top
    from brax.training.agents.sac import train as sac  # pylint: disable=g-import-not-at-top
    factory = functools.partial(
        sac_networks.make_sac_networks,
        hidden_layer_sizes=tuple(s['hidden_sizes']),
        policy_network_layer_norm=s['layer_norm'],
        q_network_layer_norm=s['layer_norm'], state_dependent_std=True,
        noise_std_type='log')
    sac.train(**common, num_envs=s['num_envs'],
              grad_updates_per_step=s['updates_per_iteration'],
              batch_size=s['batch_size'], max_replay_size=s['replay_capacity'],
              min_replay_size=s['warmup_steps'],
              learning_rate=s['actor_lr'], discounting=s['discount'],
              tau=s['tau'], reward_scaling=1.0, normalize_observations=False,
              network_factory=factory)
  if agent == 'ppo' and not timeout_info:
    patch_note = ((patch_note + '; ') if patch_note else '') + (
        f"playground's {task} has no info['time_out']: Brax's PPO ran with "
        'bootstrap_on_timeout=False (it masks truncated steps)')
  return dict(records=records, cpu=cpu,
              total_s=time.perf_counter() - t_start,
              steps=records[-1][0] if records else 0,
              brax_sps=brax_sps[-1] if brax_sps else float('nan'),
              patch=patch_note)


def _versions() -> str:
  return ('brax {} | playground {} | jax {} | mujoco {} | mujoco-mjx {} | '
          'flax {}'.format(*(H._version(n) for n in (  # pylint: disable=protected-access
              'brax', 'playground', 'jax', 'mujoco', 'mujoco-mjx', 'flax'))))


def worker(job_json: str) -> int:
  """Runs one Brax job (JSON) and prints 'RESULT <json>' last."""
  job = json.loads(job_json)
  if job.get('probe'):
    import brax  # pylint: disable=g-import-not-at-top,unused-import
    import mujoco_playground  # pylint: disable=g-import-not-at-top,unused-import
    from brax.training.agents.ppo import train  # pylint: disable=g-import-not-at-top,unused-import
    from brax.training.agents.sac import train as _  # pylint: disable=g-import-not-at-top,unused-import
    print('RESULT ' + json.dumps({'versions': _versions()}), flush=True)
    return 0
  out = brax_run(job['agent'], job['task'], job['steps'], job['num_evals'],
                 job['settings'])
  print('RESULT ' + json.dumps(out), flush=True)
  return 0


class BraxRunner:
  """Runs Brax jobs in this interpreter or in a separate one."""

  def __init__(self, python: Optional[str]):
    self.python = python
    self.where = None
    self.problem = None
    self.versions = None

  def probe(self) -> bool:
    try:
      import brax  # pylint: disable=g-import-not-at-top,unused-import
      import mujoco_playground  # pylint: disable=g-import-not-at-top,unused-import
      self.where = 'this interpreter'
      self.versions = _versions()
      return True
    except Exception as e:  # pylint: disable=broad-except
      local = f'{type(e).__name__}: {e}'
    if not self.python or not os.path.exists(self.python):
      self.problem = (
          f'not importable here ({local}), and no separate Brax interpreter '
          f'(--brax-python / $ROXIE_BRAX_PYTHON; looked for '
          f'{self.python or DEFAULT_BRAX_PYTHON})')
      return False
    try:
      res = self._call({'probe': True}, timeout=600)
    except RuntimeError as e:
      self.problem = f'{self.python} cannot run Brax: {e}'
      return False
    self.where = self.python
    self.versions = res['versions']
    return True

  def _call(self, job, timeout):
    proc = subprocess.run(
        [self.python, os.path.abspath(__file__), '--brax-worker',
         json.dumps(job)], capture_output=True, text=True, timeout=timeout,
        check=False)
    lines = [l for l in proc.stdout.splitlines() if l.startswith('RESULT ')]
    if proc.returncode != 0 or not lines:
      tail = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
      raise RuntimeError(f'exit {proc.returncode}: ' + ' | '.join(tail))
    return json.loads(lines[-1][len('RESULT '):])

  def run(self, agent, task, steps, num_evals, settings):
    if self.where == 'this interpreter':
      return brax_run(agent, task, steps, num_evals, settings)
    job = dict(agent=agent, task=task, steps=steps, num_evals=num_evals,
               settings=settings)
    return self._call(job, timeout=6 * 3600)


def _fmt(x, spec):
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return '-'
  return format(x, spec)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--task', default='CartpoleSwingup')
  parser.add_argument('--agents', default='ppo,sac')
  parser.add_argument('--backends', default='cpu,mjx',
                      help="roxie's backends to run")
  parser.add_argument('--ppo-steps', type=int, default=1_000_000)
  parser.add_argument('--sac-steps', type=int, default=60_000)
  parser.add_argument('--evals', type=int, default=11,
                      help='evaluations per run, the first at step 0')
  parser.add_argument('--threshold', type=float, default=400.)
  parser.add_argument('--brax-python',
                      default=os.environ.get('ROXIE_BRAX_PYTHON',
                                             DEFAULT_BRAX_PYTHON))
  parser.add_argument('--no-brax', action='store_true')
  parser.add_argument('--quick', action='store_true',
                      help='short budgets, low threshold (timing, not learning)')
  parser.add_argument('--physics', default='playground',
                      choices=('dm_control', 'playground'),
                      help="roxie's solver preset (roxie.envs.presets); the "
                      "default, 'playground', is the physics Brax's MJX runs "
                      "(a like-for-like speed comparison); 'dm_control' is "
                      "roxie's training default, heavier")
  parser.add_argument('--brax-worker', default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.brax_worker is not None:
    return worker(args.brax_worker)
  if args.quick:
    args.ppo_steps = min(args.ppo_steps, 200_000)
    args.sac_steps = min(args.sac_steps, 6_000)
    args.evals = min(args.evals, 6)
    args.threshold = min(args.threshold, 150.)
  settings = {'ppo': dict(PPO), 'sac': dict(SAC)}
  if args.quick:
    settings['sac']['warmup_steps'] = 1_000
  budgets = {'ppo': args.ppo_steps, 'sac': args.sac_steps}

  brax = BraxRunner(args.brax_python)
  available = (not args.no_brax) and brax.probe()
  lines = [f'task {args.task}; return threshold {args.threshold:g}; '
           f'{args.evals} evaluations of {EVAL_EPISODES} episodes per run',
           f'roxie physics={args.physics}: ' + (
               "mujoco_playground's solver options, the physics Brax's MJX "
               'runs (roxie/mjx vs brax/mjx: matched physics)'
               if args.physics == 'playground' else
               "dm_control's solver options (Newton, 100 iterations), "
               "heavier than Brax's playground physics")]
  if available:
    lines.append(f'Brax: {brax.where}: {brax.versions}')
  else:
    lines.append('Brax: NOT AVAILABLE: ' + ('--no-brax' if args.no_brax
                                             else brax.problem))
  print(H.machine_header('vs_brax: roxie vs Brax on the same machine', lines),
        flush=True)

  results: Dict[tuple, Dict[str, Any]] = {}
  for agent in args.agents.split(','):
    for who in [f'roxie/{b}' for b in args.backends.split(',') if b] + (
        ['brax/mjx'] if available else []):
      t0 = time.perf_counter()
      try:
        if who.startswith('roxie'):
          r = roxie_run(agent, who.split('/')[1], args.task, budgets[agent],
                        args.evals, settings[agent], physics=args.physics)
        else:
          r = brax.run(agent, args.task, budgets[agent], args.evals,
                       settings[agent])
      except Exception as e:  # pylint: disable=broad-except
        print(f'  {agent} {who}: FAILED ({type(e).__name__}: {e})', flush=True)
        continue
      results[(agent, who)] = r
      if r.get('patch'):
        print(f'  note: {r["patch"]}', flush=True)
      recs = r['records']
      print(f'  {agent} {who}: {r["steps"]:,} steps in {r["total_s"]:.0f} s; '
            'evals (steps@s:return) ' + ', '.join(
                f'{s}@{w:.1f}:{v:.0f}' for s, w, v in recs) +
            '; chunk steps/s ' + ', '.join(
                f'{x:,.0f}' for x in _chunk_rates(recs)) +
            f' [{time.perf_counter() - t0:.0f} s, load {H.load_now()}]',
            flush=True)

  rows = []
  for (agent, who), r in results.items():
    recs = r['records']
    thr_s, thr_steps = _first_reaching(recs, args.threshold)
    r['sps'] = _steady_sps(recs)
    # The same by process CPU time (all threads): what other processes' load
    # on a shared machine inflates least.
    cpu = r.get('cpu') or []
    r['cpu_sps'] = (_steady_sps([(n, c, v) for (n, _, v), c in zip(recs, cpu)])
                    if len(cpu) == len(recs) else float('nan'))
    r['thr_s'] = thr_s
    rows.append([agent, who, f'{r["steps"]:,}', _fmt(r['sps'], ',.0f'),
                 _fmt(r['cpu_sps'], ',.0f'),
                 _fmt(r.get('brax_sps'), ',.0f'), _fmt(thr_s, '.0f'),
                 _fmt(thr_steps, ','), f'{recs[-1][2]:.1f}' if recs else '-',
                 f'{r["total_s"]:.0f}'])
  print()
  print(H.fmt_table(['agent', 'run', 'env steps', 'sps', 'sps/cpu-s',
                     'brax sps',
                     'to thr s', 'to thr steps', 'final', 'total s'], rows))
  print()
  for agent in args.agents.split(','):
    b = results.get((agent, 'brax/mjx'))
    for backend, target in targets(agent, args.task).items():
      r = results.get((agent, f'roxie/{backend}'))
      if r is None or b is None:
        continue
      ratio = r['sps'] / b['sps'] if b['sps'] > 0 else float('nan')
      t_ratio = (b['thr_s'] / r['thr_s']
                 if not math.isnan(r['thr_s']) and not math.isnan(b['thr_s'])
                 else float('nan'))
      cpu_ratio = (r['cpu_sps'] / b['cpu_sps'] if b['cpu_sps'] > 0
                   else float('nan'))
      meets = lambda x: '-' if math.isnan(x) else ('yes' if x >= target
                                                   else 'NO')
      print(f'{agent}: roxie/{backend} vs brax/mjx (target >= {target}x): '
            f'sps {_fmt(ratio, ".2f")}x ({meets(ratio)}); per CPU-second '
            f'{_fmt(cpu_ratio, ".2f")}x ({meets(cpu_ratio)}); time to '
            f'threshold {_fmt(t_ratio, ".2f")}x')
  if not available:
    print(f'\nBrax figures missing: {brax.problem if not args.no_brax else "--no-brax"}')
  print(f'\nload average at end: {H.load_now()}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
