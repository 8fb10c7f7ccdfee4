"""The trainings: one rank's placement, the three ResNet-50 trainers, their data sets."""
