"""Client-side differential privacy: clipping and Gaussian noise on an update before upload, with accounting."""

from reshuffle.privacy.dp import ClientDP, epsilon, gaussian, noise_for_epsilon

__all__ = ["ClientDP", "epsilon", "gaussian", "noise_for_epsilon"]
