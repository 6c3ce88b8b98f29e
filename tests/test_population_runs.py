"""Populations through the run layer: `roxie train --seeds/--sweep`.

A population trains P members in one program and writes one run directory
per member that the single-run tools read unchanged. Checked here:
- each member's config.json is the single run's of its seed and swept value
  (the same RunConfig as `roxie train --seed k --set field=v`), and its
  trained parameters are those of that single run (float tolerance: see
  roxie.loops.population);
- a resumed population is bit-exact with an uninterrupted one, also after a
  kill between two members' checkpoint writes (one member a checkpoint
  ahead);
- a member that diverges stops alone; the others train on, the population
  ends with a fault (exit 1), and a resume keeps it stopped;
- bad input is refused with exit 2 and nothing written.
"""

import json
import os
import shutil
import signal

import numpy as np
import pytest

from roxie import checkpoint as ckpt
from roxie import cli
from roxie import run as run_lib
from test_resume import NATIVE_TOKEN, assert_same_checkpoints, read_rows, tiny_overrides, without_timing

TASK = 'CartpoleBalance'
STEPS, EVAL_EVERY = 160, 40
SWEEP = {'critic_lr': (1e-3, 3e-3)}
SEEDS = (0, 1)


def population(root, **kwargs):
  kwargs.setdefault('steps', STEPS)
  kwargs.setdefault('seeds', SEEDS)
  kwargs.setdefault('sweep', SWEEP)
  kwargs.setdefault('keep_checkpoints', 10)
  return run_lib.train_population(
      'sac', TASK, root=str(root), num_envs=2,
      overrides=tiny_overrides('sac'), eval_every=EVAL_EVERY,
      eval_episodes=2, verbose=False, env_options={'episode_length': 20},
      **kwargs)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """A 4-member population (2 seeds x 2 critic_lr) trained to STEPS."""
  root = tmp_path_factory.mktemp('pop')
  return root, population(root)


NAMES = ['sac-CartpoleBalance-seed0-critic_lr=0.001',
         'sac-CartpoleBalance-seed1-critic_lr=0.001',
         'sac-CartpoleBalance-seed0-critic_lr=0.003',
         'sac-CartpoleBalance-seed1-critic_lr=0.003']


def test_members_are_run_directories_of_their_own_single_runs(trained,
                                                                tmp_path):
  root, result = trained
  assert [os.path.basename(r.out) for r in result.members] == NAMES
  for name, (seed, lr) in zip(NAMES, [(0, 1e-3), (1, 1e-3), (0, 3e-3),
                                      (1, 3e-3)]):
    member = os.path.join(root, name)
    with open(os.path.join(member, run_lib.CONFIG_FILE)) as f:
      saved = json.load(f)
    single = run_lib.new_run_config(
        'sac', TASK, 'cpu', 2, STEPS, seed,
        dict(tiny_overrides('sac'), critic_lr=lr), EVAL_EVERY, 2,
        {'episode_length': 20}, None)
    assert saved == single.to_json()
    assert len(read_rows(member)) == STEPS // EVAL_EVERY
    assert ckpt.list_steps(member)[-1] == STEPS
    with open(os.path.join(member, run_lib.POPULATION_FILE)) as f:
      assert json.load(f) == {'members': NAMES, 'stopped': {}}
  # The single-run tools read a member as a run.
  ev = run_lib.evaluate_run(os.path.join(root, NAMES[3]), episodes=2)
  assert np.isfinite(float(ev.mean))
  bundle = str(tmp_path / 'bundle')
  assert cli.main(['export', '--run', os.path.join(root, NAMES[3]), '--to',
                   bundle, '--episodes', '2']) == 0
  assert os.path.exists(os.path.join(bundle, 'policy.npz'))


def test_a_member_trains_as_the_single_run_of_its_config(trained, tmp_path):
  root, _ = trained
  single = run_lib.train(
      'sac', TASK, num_envs=2, steps=STEPS, seed=1,
      out=str(tmp_path / 'single'),
      overrides=dict(tiny_overrides('sac'), critic_lr=3e-3),
      eval_every=EVAL_EVERY, eval_episodes=2, verbose=False,
      env_options={'episode_length': 20})
  a = ckpt.read(ckpt.latest(os.path.join(root, NAMES[3])))['agent']
  b = ckpt.read(ckpt.latest(single.out))['agent']
  assert sorted(a) == sorted(b)
  for k in a:
    # The member computes in float32 what the single run may fold from a
    # Python float (see roxie.loops.population), and its matrix products
    # are batched: equal up to float rounding, grown over 140 updates.
    np.testing.assert_allclose(a[k], b[k], rtol=2e-3, atol=2e-4, err_msg=k)
  # The other seed's member differs: the comparison can fail.
  c = ckpt.read(ckpt.latest(os.path.join(root, NAMES[2])))['agent']
  assert any(not np.allclose(a[k], c[k], rtol=2e-3, atol=2e-4) for k in a)


def _crash_copy(src_root, dst_root, after_step, ahead=()):
  """dst = src as if killed after the checkpoints of `after_step` (members
  in `ahead` one checkpoint further: killed between members' writes)."""
  shutil.copytree(src_root, dst_root)
  for name in os.listdir(dst_root):
    d = os.path.join(dst_root, name)
    limit = after_step + (EVAL_EVERY if name in ahead else 0)
    for step in ckpt.list_steps(d):
      if step > limit:
        shutil.rmtree(os.path.join(ckpt.checkpoint_dir(d), ckpt.step_name(step)))


@pytest.mark.parametrize('after, ahead', [(80, ()), (80, (NAMES[1],)),
                                          (0, (NAMES[3],))],
                         ids=['together', 'ahead', 'before-the-first'])
def test_resumed_population_is_bit_exact(trained, tmp_path, capsys, after,
                                         ahead):
  """'before-the-first': killed during the first checkpoint round (one
  member has it): the population starts again from step 0. 'together' also
  finds one member's metrics.csv cut mid-row: it is restored from that
  member's checkpoint, with a warning that shows although verbose=False."""
  root, _ = trained
  copy = tmp_path / 'b'
  _crash_copy(root, copy, after, ahead)
  damaged = copy / NAMES[1] / run_lib.METRICS_FILE
  if not ahead:
    text = damaged.read_text()
    damaged.write_text(text[:len(text) // 2 + 3])
  result = run_lib.resume_population(str(copy / NAMES[2]), verbose=False,
                                     keep_checkpoints=10)
  err = capsys.readouterr().err
  assert ('warning: seed1 critic_lr=0.001: metrics.csv was damaged' in err
          ) == (not ahead), err
  assert [r.env_steps for r in result.members] == [STEPS] * 4
  for name in NAMES:
    a, b = os.path.join(root, name), os.path.join(copy, name)
    assert_same_checkpoints(
        ckpt.latest(a), ckpt.latest(b),
        skip=(('loop', NATIVE_TOKEN),))  # Native version tokens.
    assert without_timing(read_rows(a)) == without_timing(read_rows(b))


def test_a_population_is_refused_in_a_multi_process_job(trained, tmp_path,
                                                         monkeypatch):
  """Each process would train and write every member: refused, and nothing
  is written (resume too)."""
  root, _ = trained
  monkeypatch.setattr(run_lib.population.jax, 'process_count', lambda: 2)
  with pytest.raises(run_lib.RunError, match='one process; this job has 2'):
    population(tmp_path / 'runs')
  assert not (tmp_path / 'runs').exists()
  before = {n: read_rows(os.path.join(root, n)) for n in NAMES}
  with pytest.raises(run_lib.RunError, match='one process'):
    run_lib.resume_population(os.path.join(root, NAMES[0]), steps=2 * STEPS)
  assert {n: read_rows(os.path.join(root, n)) for n in NAMES} == before


def test_a_diverged_member_stops_alone_and_the_population_faults(tmp_path):
  # actor_lr 1e30: the first actor step makes that member's policy inf/NaN.
  with pytest.raises(run_lib.TrainingFault, match='1 of 2 members diverged'):
    population(tmp_path, seeds=(0,), sweep={'actor_lr': (3e-4, 1e30)},
               steps=120)
  good = tmp_path / 'sac-CartpoleBalance-seed0-actor_lr=0.0003'
  bad = tmp_path / 'sac-CartpoleBalance-seed0-actor_lr=1e+30'
  assert ckpt.list_steps(str(good))[-1] == 120
  rows = read_rows(str(bad))
  assert int(rows[-1]['nonfinite_params']) > 0
  assert not ckpt.list_steps(str(bad)) or ckpt.list_steps(str(bad))[-1] < 120
  with open(bad / run_lib.POPULATION_FILE) as f:
    assert list(json.load(f)['stopped']) == [bad.name]
  # A resume to a larger total trains the good member on, the other stays.
  with pytest.raises(run_lib.TrainingFault, match='1 of 2 members'):
    run_lib.resume_population(str(good), steps=160, verbose=False)
  assert ckpt.list_steps(str(good))[-1] == 160
  assert len(read_rows(str(bad))) == len(rows)


def test_a_member_cannot_be_resumed_alone(trained):
  root, _ = trained
  with pytest.raises(run_lib.RunError, match='member of a population'):
    run_lib.resume(os.path.join(root, NAMES[0]))


@pytest.mark.parametrize('argv, message', [
    (['--seeds', '0,1', '--seed', '3'], '--seed and --seeds are exclusive'),
    (['--seeds', '0,0'], 'repeats a seed'),
    (['--seeds', '2', '--task', 'Nope'], "Unknown task 'Nope'"),
    (['--seeds', 'x'], 'cannot read'),
    (['--sweep', 'batch_size=64,128'], 'batch_size'),
    (['--sweep', 'num_envs=2,4'], 'num_envs is a run setting'),
    (['--sweep', 'nosuchfield=1,2'], 'nosuchfield'),
    (['--sweep', 'critic_lr='], 'no values'),
    (['--sweep', 'critic_lr=1,2', '--sweep', 'critic_lr=3'], 'given twice'),
    (['--sweep', 'critic_lr=1e-3', '--set', 'critic_lr=1e-3'],
     'both swept and set'),
    (['--seeds', '2', '--obs', 'pixels'], 'pixels'),
    (['--seeds', '2', '--keep-checkpoints', '1'], 'at least 2 checkpoints'),
])
def test_bad_population_input_exits_2_and_writes_nothing(
    tmp_path, capsys, argv, message):
  out = tmp_path / 'runs'
  code = cli.main(['train', '--task', TASK, '--steps', '100', '--out',
                   str(out)] + argv)  # A later --task wins.
  assert code == 2
  assert message in capsys.readouterr().err
  assert not out.exists()


def test_duplicate_member_names_are_refused(tmp_path):
  with pytest.raises(run_lib.RunError, match='distinct directory names'):
    population(tmp_path, seeds=(0, 1), sweep=None, names=['a', 'a'])
  assert not os.listdir(tmp_path)


def test_parse_seeds_and_sweep():
  assert run_lib.parse_seeds('3') == (0, 1, 2)
  assert run_lib.parse_seeds('4,7') == (4, 7)
  assert run_lib.parse_seeds('5,') == (5,)
  assert run_lib.parse_sweep(['tau=0.01,0.02', 'critic_lr=3e-4']) == {
      'tau': (0.01, 0.02), 'critic_lr': (3e-4,)}
  assert run_lib.member_names('sac', 'T', (0, 1), {'tau': (0.5, 0.25)}) == [
      'sac-T-seed0-tau=0.5', 'sac-T-seed1-tau=0.25']


def test_a_signal_stops_the_population_with_checkpoints_and_it_resumes_exactly(
    trained, tmp_path, monkeypatch):
  """SIGINT after the second compiled call: every member checkpoints at that
  boundary (scheduled checkpoints are put off past the end), Interrupted is
  raised, and the resumed population equals the uninterrupted one."""
  from roxie.run import population as population_lib
  root, _ = trained
  real, calls = population_lib._call, []

  def call_then_signal(*args, **kwargs):
    out = real(*args, **kwargs)
    calls.append(out[2])
    if len(calls) == 2:
      os.kill(os.getpid(), signal.SIGINT)
    return out

  monkeypatch.setattr(population_lib, '_call', call_then_signal)
  with pytest.raises(run_lib.Interrupted) as stopped:
    population(tmp_path, checkpoint_every=10_000)
  assert stopped.value.env_steps == calls[1] < STEPS
  for name in NAMES:
    assert ckpt.list_steps(str(tmp_path / name)) == [calls[1]]
  monkeypatch.setattr(population_lib, '_call', real)
  run_lib.resume_population(str(tmp_path / NAMES[0]), verbose=False)
  for name in NAMES:
    a, b = os.path.join(root, name), str(tmp_path / name)
    assert_same_checkpoints(ckpt.latest(a), ckpt.latest(b),
                            skip=(('loop', NATIVE_TOKEN),))
    assert without_timing(read_rows(a)) == without_timing(read_rows(b))
