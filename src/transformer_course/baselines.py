"""Chapter 7, Honest baselines for the digits: k-nearest neighbours, an SVM, a small CNN.

A vision transformer's accuracy means little on its own. These models see the
same pixels of the same split (:func:`~transformer_course.data.load_digits`):

* kNN and an RBF-kernel SVM on the 64 raw pixels (scikit-learn), their
  hyperparameters chosen by 5-fold cross-validation on the training images
  alone, never on the test images;
* :class:`SmallCNN`, two 3×3 convolutions and a linear head, trained with the
  course's loop like the ViT. Its convolutions carry the inductive biases the
  ViT has to learn from data: locality (a pixel interacts with its neighbours
  first) and translation equivariance (the same filter everywhere).
"""

from __future__ import annotations

import torch
from torch import nn

from .data import Digits
from .shapes import expect_shape

__all__ = ["SmallCNN", "knn_and_svm"]

#: The hyperparameter grids searched by cross-validation on the training split.
KNN_GRID = {"n_neighbors": [1, 3, 5, 7], "weights": ["uniform", "distance"]}
SVM_GRID = {"C": [1, 3, 10, 30], "gamma": ["scale", 0.5, 1.0, 2.0]}


def knn_and_svm(digits: Digits, folds: int = 5) -> dict[str, tuple[float, dict]]:
    """Chapter 7: test accuracy of kNN and an RBF SVM, each tuned by CV on train.

    Returns ``{"kNN": (accuracy, chosen hyperparameters), "SVM": (...)}``; the
    accuracies are fractions of the test images classified right.
    """
    from sklearn.model_selection import GridSearchCV
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.svm import SVC

    x_train = digits.x_train.flatten(1).numpy()  # (N_train, 64): raw pixels
    x_test = digits.x_test.flatten(1).numpy()  # (N_test, 64)
    y_train, y_test = digits.y_train.numpy(), digits.y_test.numpy()
    searches = {
        "kNN": GridSearchCV(KNeighborsClassifier(), KNN_GRID, cv=folds),
        "SVM": GridSearchCV(SVC(), SVM_GRID, cv=folds),
    }
    results = {}
    for name, search in searches.items():
        search.fit(x_train, y_train)  # cross-validation on the training images only
        accuracy = float((search.predict(x_test) == y_test).mean())
        results[name] = (accuracy, dict(search.best_params_))
    return results


class SmallCNN(nn.Module):
    """Chapter 7: a small CNN for 8×8 digits, images (B, 1, 8, 8) -> logits (B, 10).

    conv 3×3 (C -> c₁), GELU, conv 3×3 (c₁ -> c₂), GELU, 2×2 max-pool to 4×4,
    flatten, linear head. Padding keeps 8×8 through both convolutions.

    Args:
        channels: (c₁, c₂), the two convolutions' output channels.
        in_channels: C.
        n_classes: the head's outputs.
        image_size: H = W, even.
    """

    def __init__(
        self,
        channels: tuple[int, int] = (16, 32),
        in_channels: int = 1,
        n_classes: int = 10,
        image_size: int = 8,
    ):
        super().__init__()
        c1, c2 = channels
        self.in_channels, self.image_size = in_channels, image_size
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, 3, padding=1),  # (B, c1, H, W)
            nn.GELU(),
            nn.Conv2d(c1, c2, 3, padding=1),  # (B, c2, H, W)
            nn.GELU(),
            nn.MaxPool2d(2),  # (B, c2, H/2, W/2)
        )
        self.head = nn.Linear(c2 * (image_size // 2) ** 2, n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        size = self.image_size
        expect_shape(images, "B C H W", "images", C=self.in_channels, H=size, W=size)
        features = self.features(images)  # (B, c2, H/2, W/2)
        return self.head(features.flatten(1))  # (B, c2·H/2·W/2) -> (B, classes)
