"""What a ReacherEasy evaluation episode that misses looks like.

A ReacherEasy endpoint is a mean of 10 deterministic episodes, and a policy
that reads ~980 on most of them sometimes scores 0-880 on one (std ~290).
This evaluates an exported policy on many episodes in one compiled program
(the library evaluator's resets, `roxie.export.evaluate_policy`'s seed
convention) and, for each episode below --below, prints the target's
distance from the arm's base, the closest the fingertip could get to it
(forward kinematics over the joints' ranges: is the target reachable?),
the closest it got, its distance over the last 100 steps and the joints'
ranges: a target out of reach would be the task's fault; a reachable one the
policy's.

    roxie export --run RUN_DIR --to /tmp/bundle
    python benchmarks/reacher_misses.py /tmp/bundle --episodes 50
"""

import argparse
import sys

import jax
import mujoco
import numpy as np

import roxie
from roxie.envs.task import dm_control_model
from roxie.loops import host


def rollouts(policy, episodes: int, seed: int):
  """Observations [T, N, O] and rewards [T, N] of `episodes` episodes."""
  env = policy.make_env(num_envs=episodes, backend='cpu')
  host.claim(env, host.EVALUATION)

  def run(params, key):
    k_reset, _ = jax.random.split(key)  # As make_evaluator splits it.

    def body(state, _):
      action = policy.apply(params, state.obs)
      nxt, ts = env.step(state, action)
      return nxt, (state.obs, ts.reward)

    _, out = jax.lax.scan(body, env.reset(k_reset), None,
                          length=env.spec.episode_length)
    return out

  obs, rew = jax.jit(run)(policy.params, jax.random.PRNGKey(seed))
  return np.asarray(obs), np.asarray(rew)


class Arm:
  """The suite's reacher arm: where its fingertip is, and can be."""

  def __init__(self):
    self.model = dm_control_model('reacher')
    self.data = mujoco.MjData(self.model)
    self.finger = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM,
                                    'finger')
    wrist = np.linspace(*self.model.jnt_range[1], 101)
    shoulder = np.linspace(-np.pi, np.pi, 181)
    self.reach = np.array([self.fingertip([s, w])
                           for s in shoulder for w in wrist])

  def fingertip(self, qpos) -> np.ndarray:
    """The fingertip's (x, y) at joint angles `qpos` [2]."""
    self.data.qpos[:] = qpos
    mujoco.mj_kinematics(self.model, self.data)
    return self.data.geom_xpos[self.finger, :2].copy()

  def closest(self, target) -> float:
    """How near the fingertip can come to `target` (x, y), within ~2 mm."""
    return float(np.linalg.norm(self.reach - target, axis=-1).min())


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('bundle', help='a ReacherEasy/Hard policy bundle')
  p.add_argument('--episodes', type=int, default=50)
  p.add_argument('--seed', type=int, default=0)
  p.add_argument('--below', type=float, default=900.0,
                 help='describe episodes whose return is below this')
  a = p.parse_args(argv)
  try:
    policy = roxie.load_policy(a.bundle)
  except ValueError as e:  # export.BundleError
    print(f'reacher_misses.py: {e}', file=sys.stderr)
    return 2
  if not policy.metadata['task'].startswith('Reacher'):
    print(f'reacher_misses.py: {a.bundle} is a {policy.metadata["task"]} '
          'policy; give a ReacherEasy or ReacherHard bundle.', file=sys.stderr)
    return 2
  obs, rew = rollouts(policy, a.episodes, a.seed)
  # The flat observation: position [2], to_target [2], velocity [2].
  q, to_target = obs[..., :2], obs[..., 2:4]
  arm = Arm()
  returns = rew.sum(0)
  print(f'{a.episodes} episodes: mean {returns.mean():.1f}, median '
        f'{np.median(returns):.1f}, {(returns < a.below).sum()} below '
        f'{a.below:g}')
  for i in np.flatnonzero(returns < a.below):
    target = arm.fingertip(q[0, i]) + to_target[0, i]
    dist = np.linalg.norm(to_target[:, i], axis=-1)
    print(f'episode {i}: return {returns[i]:.0f}; target '
          f'{np.linalg.norm(target):.3f} from the base, reachable to '
          f'{arm.closest(target):.3f}; closest '
          f'{dist.min():.3f}, last 100 steps {dist[-100:].mean():.3f}; '
          f'shoulder [{q[:, i, 0].min():.2f}, {q[:, i, 0].max():.2f}], wrist '
          f'[{q[:, i, 1].min():.2f}, {q[:, i, 1].max():.2f}]')
  return 0


if __name__ == '__main__':
  sys.exit(main())
