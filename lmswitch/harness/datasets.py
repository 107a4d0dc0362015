"""The project's style datasets in ``assets/data/`` (provenance in ``assets/data/DATA.md``).

Each dataset is two files of paired texts, one per line: line ``i`` of both
files is about the same topic or situation, once in each style, so a switch
learns the style rather than the topic. Every tenth pair (``i % 10 == 9``) is
held out of training and used only for evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lmswitch.io.resources import styles_dir

DATA_DIR = styles_dir()
HELDOUT_EVERY = 10

# name -> (folder, positive file, negative file, positive label, negative label)
DATASETS: dict[str, tuple[str, str, str, str, str]] = {
    "sentiment": ("sentiment", "positive.txt", "negative.txt", "positive", "negative"),
    "toxicity": ("toxicity", "civil.txt", "toxic.txt", "non-toxic", "toxic"),
    "formality": ("formality", "formal.txt", "informal.txt", "formal", "informal"),
}


@dataclass(frozen=True)
class StyleData:
    """Paired texts of one style contrast; ``positive[i]`` and ``negative[i]`` share a topic."""

    name: str
    positive_label: str
    negative_label: str
    positive: tuple[str, ...]
    negative: tuple[str, ...]

    def _part(self, held: bool, limit: int | None = None) -> tuple[list[str], list[str]]:
        keep = [i for i in range(len(self.positive)) if (i % HELDOUT_EVERY == HELDOUT_EVERY - 1) == held]
        if limit is not None:
            keep = keep[:limit]
        return [self.positive[i] for i in keep], [self.negative[i] for i in keep]

    def train(self, limit: int | None = None) -> tuple[list[str], list[str]]:
        """(positive, negative) training texts; ``limit`` keeps only the first pairs."""
        return self._part(False, limit)

    def heldout(self) -> tuple[list[str], list[str]]:
        """(positive, negative) texts never used for training."""
        return self._part(True)


def _read_lines(path: Path) -> tuple[str, ...]:
    if not path.is_file():
        raise ValueError(f"dataset file {path} is missing; rebuild it or point --data at the folder that holds it")
    return tuple(line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def load_dataset(name: str, root: str | Path | None = None) -> StyleData:
    """Load one of :data:`DATASETS` from ``root`` (default: the shipped ``assets/data``)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    folder, pos_file, neg_file, pos_label, neg_label = DATASETS[name]
    base = Path(root) if root is not None else DATA_DIR
    pos, neg = _read_lines(base / folder / pos_file), _read_lines(base / folder / neg_file)
    if len(pos) != len(neg):
        raise ValueError(f"dataset {name!r} is not paired: {len(pos)} {pos_label} vs {len(neg)} {neg_label} lines")
    return StyleData(name, pos_label, neg_label, pos, neg)
