"""Physics presets: which solver settings a task's model is simulated with.

`'dm_control'` (the default) simulates each suite model exactly as the
installed dm_control ships it: Newton with up to 100 (finger: 200) solver
iterations and 50 line-search iterations, RK4 for cartpole and acrobot, an
elliptic friction cone for finger. The suite's reference tests pin it.

`'playground'` is an opt-in deviation from dm_control: the per-domain solver
settings of mujoco_playground's DM Control suite (its `dm_control_suite/xmls/
<domain>.xml` `<option>` elements, github.com/google-deepmind/mujoco_playground
at commit d5e6b475), which Brax's and Playground's published MJX numbers use.
They cap the constraint solver at 1-4 iterations and 4-10 line-search
iterations, integrate with semi-implicit Euler (implicitfast for finger)
without implicit joint damping (`eulerdamp` disabled), and use the pyramidal
friction cone. That makes an MJX step cheaper, and makes roxie's MJX physics
match Brax's for like-for-like speed comparisons; returns change (the effect
is measured in benchmarks/RESULTS.md, 'MJX physics preset').

What the preset does NOT take from playground: the simulation timestep
(playground halves it for finger, fish and pendulum, quarters it for
reacher and raises it for swimmer), the control timestep, episode lengths,
fluid density, and the task functions. Those define the task rather than how
hard the solver works; the preset leaves them at dm_control's. For the tasks
`benchmarks/vs_brax.py` runs (cartpole, cheetah, walker, hopper) the
timesteps already agree, so under the preset every `opt` field named here
matches playground's.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

import mujoco

PHYSICS_PRESETS = ('dm_control', 'playground')
DEFAULT_PHYSICS = 'dm_control'


class SolverOptions(NamedTuple):
  """The `mjOption` fields a preset sets for one domain."""
  iterations: int  # opt.iterations: constraint solver iterations.
  ls_iterations: int  # opt.ls_iterations: line-search iterations.
  integrator: str  # opt.integrator: an mjtIntegrator name ('EULER', ...).
  cone: str  # opt.cone: an mjtCone name ('PYRAMIDAL', 'ELLIPTIC').
  solver: str  # opt.solver: an mjtSolver name ('NEWTON', ...).
  disable: Tuple[str, ...]  # opt.disableflags, exactly: mjtDisableBit names.


def _euler(iterations: int, ls_iterations: int, *disable: str,
           integrator: str = 'EULER') -> SolverOptions:
  """Playground's options: Newton, pyramidal cone, eulerdamp always off."""
  return SolverOptions(iterations, ls_iterations, integrator, 'PYRAMIDAL',
                       'NEWTON', tuple(disable) + ('EULERDAMP',))


# mujoco_playground/_src/dm_control_suite/xmls/<domain>.xml, `<option>` and
# `<flag>` (commit d5e6b475). An XML that names no integrator, cone or solver
# gets MuJoCo's defaults: Euler, pyramidal, Newton.
PLAYGROUND: Dict[str, SolverOptions] = {
    'acrobot': _euler(2, 4, 'CONSTRAINT'),
    'ball_in_cup': _euler(1, 4),
    'cartpole': _euler(1, 4, 'CONTACT'),
    'cheetah': _euler(4, 8),
    'finger': _euler(2, 8, 'GRAVITY', integrator='IMPLICITFAST'),
    'fish': _euler(2, 6, 'GRAVITY', 'CONSTRAINT', 'CONTACT'),
    'hopper': _euler(4, 10),
    'humanoid': _euler(4, 8),
    'pendulum': _euler(4, 8, 'CONTACT'),
    'point_mass': _euler(1, 4, 'CONTACT'),
    'reacher': _euler(1, 6, 'CONTACT'),
    'swimmer': _euler(4, 8, 'CONTACT'),
    'walker': _euler(2, 5),
}


def check_preset(physics: str) -> str:
  """`physics` if it names a preset, else a ValueError listing them."""
  if physics not in PHYSICS_PRESETS:
    raise ValueError(f'Unknown physics preset {physics!r}; choose one of '
                     f'{", ".join(PHYSICS_PRESETS)}.')
  return physics


def solver_options(domain: str, physics: str) -> SolverOptions | None:
  """The options preset `physics` sets for a suite domain (None: none).

  Args:
    domain: a dm_control suite domain, e.g. 'cartpole'.
    physics: a name in PHYSICS_PRESETS.

  Returns:
    None for 'dm_control' (the model is left as dm_control ships it), else the
    domain's `SolverOptions`.

  Raises:
    ValueError: unknown preset, or a domain the preset has no settings for.
  """
  if check_preset(physics) == 'dm_control':
    return None
  if domain not in PLAYGROUND:
    raise ValueError(
        f"physics='{physics}' has no settings for domain {domain!r} (it "
        f'covers {", ".join(sorted(PLAYGROUND))}); use '
        f"physics='dm_control'.")
  return PLAYGROUND[domain]


def apply_preset(model: mujoco.MjModel, domain: str, physics: str) -> None:
  """Sets preset `physics`'s solver options on `model.opt`, in place.

  `opt` fields are runtime options of a compiled model, so no recompilation
  is needed; both backends read them from this model.

  Args:
    model: the model to change (the caller's own copy).
    domain: its dm_control suite domain.
    physics: a name in PHYSICS_PRESETS.
  """
  options = solver_options(domain, physics)
  if options is None:
    return
  opt = model.opt
  opt.iterations = options.iterations
  opt.ls_iterations = options.ls_iterations
  opt.integrator = int(getattr(mujoco.mjtIntegrator,
                               f'mjINT_{options.integrator}'))
  opt.cone = int(getattr(mujoco.mjtCone, f'mjCONE_{options.cone}'))
  opt.solver = int(getattr(mujoco.mjtSolver, f'mjSOL_{options.solver}'))
  flags = 0
  for name in options.disable:
    flags |= int(getattr(mujoco.mjtDisableBit, f'mjDSBL_{name}'))
  opt.disableflags = flags
