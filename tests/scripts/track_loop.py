"""A loop nothing can recognise (no framework at all), told to epochscope with
``workloads.track``: 2 epochs of 3 steps of 4 images, accuracy 0.5 then 0.75. The same
script runs unchanged, and silently, outside ``workloads profile``."""

import time

from workloads import track

track.run(model="hand-rolled", batch_size=4)
for epoch in range(2):
    with track.epoch():
        for step in range(3):
            time.sleep(0.05)
            track.step(images=4, loss=1.0 / (1 + epoch * 3 + step), input_wait=0.01)
        track.accuracy(top1=0.5 + 0.25 * epoch)
print("done")
