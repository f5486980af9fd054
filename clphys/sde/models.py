"""Built-in models (instances of :class:`clphys.sde.Model`); k_B = 1, unit mass.

BROWNIAN
    free overdamped Brownian motion dx = sqrt(2 D) dW; parameter D.
FREE_PARTICLE
    free underdamped particle dx = v dt, dv = -gamma v dt + sqrt(2 gamma kT) dW
    (an Ornstein-Uhlenbeck velocity); parameters gamma, kT.
OVERDAMPED_WASHBOARD
    gamma dx = (-V'(x) + f) dt + sqrt(2 gamma kT) dW with V = V0 sin(2 pi x),
    x periodic with period 1; parameters gamma, V0, f, kT.
JOSEPHSON
    the Stewart-McCumber model of a Josephson junction (Brownian particle in
    a rocked, tilted washboard): x'' + gamma x' = -V'(x) + a cos(omega t) + f
    + sqrt(2 gamma kT) xi(t), V(x) = sin(2 pi x), so V'(x) = 2 pi cos(2 pi x);
    x periodic (period 1), time kept modulo 2 pi / omega; the drive
    a cos(omega t) is a forcing (one cos per step); parameters gamma, a,
    omega, f, kT. (Januszewski and Kostur, Comput. Phys. Commun. 181, 183
    (2010); Machura et al., Phys. Rev. Lett. 98, 040601 (2007).)

The Kuramoto model has kernels of its own: :func:`clphys.sde.kuramoto`.
"""

from .model import Model

__all__ = ["BROWNIAN", "FREE_PARTICLE", "OVERDAMPED_WASHBOARD", "JOSEPHSON"]

BROWNIAN = Model(variables=["x"], drift={"x": "0"}, noise={"x": "sqrt(2*D)"},
                 parameters=["D"], name="brownian")

FREE_PARTICLE = Model(variables=["x", "v"], drift={"x": "v", "v": "-gamma*v"},
                      noise={"v": "sqrt(2*gamma*kT)"}, parameters=["gamma", "kT"],
                      name="free_particle")

OVERDAMPED_WASHBOARD = Model(
    variables=["x"],
    drift={"x": "(f - 2*M_PI_F*V0*cos(2*M_PI_F*x)) / gamma"},
    noise={"x": "sqrt(2*kT/gamma)"},
    parameters=["gamma", "V0", "f", "kT"], periodic={"x": 1.0}, name="overdamped_washboard")

JOSEPHSON = Model(
    variables=["x", "v"],
    drift={"x": "v", "v": "-gamma*v - 2*M_PI_F*cos(2*M_PI_F*x) + drive + f"},
    noise={"v": "sqrt(2*gamma*kT)"},
    parameters=["gamma", "a", "omega", "f", "kT"],
    forcing={"drive": "a*cos(omega*t)"},
    periodic={"x": 1.0}, drive_period="2*M_PI/omega", name="josephson")
