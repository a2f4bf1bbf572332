"""Spec sections that are templates of a stage command's config: the keys a spec gives once,
checked by the config itself, laid into every stage of that kind. Torch-free."""

from __future__ import annotations

import dataclasses

from depthbench.config.base import ConfigError, PlainConfig


class StageTemplate(PlainConfig):
    """A spec section that is a template of one stage command's config (``STAGE``). The
    section's own fields are the grid's (whether the stage runs, which runs it reads); every
    other key is a key of the stage's config, checked once, by that config, and laid into each
    stage of its kind under the keys the grid fills per stage (``FILLED``: its run, output,
    device, tags). ``section.KEY`` reads the template's value (the config's default where the
    spec gives none): every knob of the command is reachable from a spec and checked in one
    place."""

    STAGE = PlainConfig
    FILLED: tuple = ()
    DEFAULTS: dict = {}            # where a grid's default is not the command's
    PLACEHOLDER = {"run": "RUN"}   # filled keys a template's check needs

    @classmethod
    def own(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.name != "template"]

    @classmethod
    def known(cls) -> list[str]:
        own = cls.own()
        return own + [f.name for f in dataclasses.fields(cls.STAGE)
                      if f.name not in cls.FILLED and f.name not in own]

    @classmethod
    def from_dict(cls, d: dict):
        """A flat section (its own keys beside the stage's) -> the section."""
        filled = sorted(k for k in d if k in cls.FILLED and k not in cls.own())
        if filled:
            raise ConfigError(f"{filled[0]}: is set by the grid for each stage (its run, output, "
                              "device and tags); a spec cannot give it")
        unknown = sorted(set(d) - set(cls.known()))
        if unknown:
            raise ConfigError(f"unknown key(s) {', '.join(unknown)}; known: "
                              f"{', '.join(cls.known())}")
        own = {k: v for k, v in d.items() if k in cls.own()}
        return super().from_dict({**own, "template": {k: v for k, v in d.items() if k not in own}})

    def __post_init__(self):
        self._check_types()
        cfg = self.config(**self.PLACEHOLDER)
        object.__setattr__(self, "_config", cfg)
        # every key of the template, given or default: two spellings of one section are equal
        object.__setattr__(self, "template", {k: v for k, v in cfg.to_dict().items()
                                              if k in self.known() and k not in self.own()})

    def config(self, **filled):
        """The stage's config: the template under ``filled`` (the grid's keys for one stage)."""
        return self.STAGE.from_dict({**self.DEFAULTS, **self.template, **filled})

    def __getattr__(self, key):
        cfg = self.__dict__.get("_config")
        if cfg is None or key not in self.known():
            raise AttributeError(key)
        return getattr(cfg, key)

    def to_dict(self) -> dict:
        """Flat, as a spec spells it: the section's keys and every key of the template."""
        d = super().to_dict()
        return {**{k: v for k, v in d.items() if k != "template"}, **d["template"]}
