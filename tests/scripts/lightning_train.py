"""An image classifier in the style of Lightning's own examples (a LightningModule with
``training_step``/``validation_step``/``configure_optimizers``, ``self.log("val_acc", ...)``,
``Trainer(max_epochs=2, accelerator="cpu").fit``) over torchvision's ImageFolder:

    python lightning_train.py DATA [--max-epochs 2] [--batch-size 8] [--strategy ddp --devices 2]

(``--strategy ddp``: Lightning starts the other ranks by running this script again;
``ddp_spawn``: by ``torch.multiprocessing`` with the trainer pickled into them.)

Nothing in it knows about epochscope: ``workloads profile`` must recognise it unmodified.
"""

import argparse
import os

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


class LitClassifier(L.LightningModule):
    def __init__(self, num_classes: int, learning_rate: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )  # fmt: skip
        self.classifier = nn.Linear(32, num_classes)
        self.correct = self.seen = 0

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        hits = (logits.argmax(dim=1) == y).float()
        self.correct, self.seen = self.correct + int(hits.sum()), self.seen + len(y)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", hits.mean(), prog_bar=True)

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.print(f"epoch {self.current_epoch}: val_acc {self.correct / self.seen:.4f}")
        self.correct = self.seen = 0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate, momentum=0.9)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("--max-epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--devices", type=int, default=1)
    # keep the loaders' workers across epochs (a healthy script: without it Lightning forks
    # them again every epoch, which the epoch_restart finding names)
    parser.add_argument("--persistent-workers", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    transform = transforms.Compose([
        transforms.Resize(args.image_size), transforms.CenterCrop(args.image_size),
        transforms.ToTensor(),
    ])  # fmt: skip
    train = datasets.ImageFolder(os.path.join(args.data, "train"), transform)
    val = datasets.ImageFolder(os.path.join(args.data, "val"), transform)
    persistent = args.persistent_workers and args.workers > 0
    train_loader = DataLoader(train, batch_size=args.batch_size, shuffle=True,
                              num_workers=args.workers, persistent_workers=persistent)  # fmt: skip
    val_loader = DataLoader(val, batch_size=args.batch_size, num_workers=args.workers,
                            persistent_workers=persistent)  # fmt: skip

    model = LitClassifier(num_classes=len(train.classes))
    trainer = L.Trainer(max_epochs=args.max_epochs, accelerator="cpu", devices=args.devices,
                        strategy=args.strategy, enable_progress_bar=False,
                        enable_model_summary=False)  # fmt: skip
    trainer.fit(model, train_loader, val_loader)


if __name__ == "__main__":
    main()
