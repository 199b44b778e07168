"""The rule of rule.md: the 90% t-interval over the draws' paired ratios (without the statistical features / with
them, each draw's geometric mean over the 24 cells x seeds 5-44, from ablations.sh and ablations_more.sh)."""
import sys

import numpy as np
from scipy import stats

r = np.array([float(v) for v in sys.argv[1:]])
half = stats.t.ppf(0.95, len(r) - 1) * r.std(ddof=1) / np.sqrt(len(r))
print(f"draws {r.tolist()}: mean {r.mean():.4f}, 90% t-interval [{r.mean() - half:.4f}, {r.mean() + half:.4f}]"
      f" -> {'measurably worse' if r.mean() - half > 1 else 'not measurably worse'}")
