"""Trains faiss's Clustering on the cases kvlab_bench_kmeans_faiss --write left in DIR (same data,
same starting centroids, same iterations, every point: no subsampling) and writes back, per case,
NAME.faiss.f32 (the last run's centroids) and NAME.faiss.txt ("VERSION THREADS", then "WALL CPU"
seconds per run; CPU: the process's user + system time). Run by benchmarks/kmeans_faiss_pypi.sh inside its faiss-cpu venv.
  python kmeans_faiss_pypi.py DIR --threads T --repeats R
"""
import argparse
import os
import time

import faiss
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    faiss.omp_set_num_threads(a.threads)  # OpenBLAS's threads: OPENBLAS_NUM_THREADS (the .sh sets it)
    for line in open(os.path.join(a.dir, "cases.txt")):
        name, n, d, k, groups, iters = line.split()
        n, d, k, groups, iters = int(n), int(d), int(k), int(groups), int(iters)
        xs = np.fromfile(os.path.join(a.dir, name + ".x.f32"), dtype="<f4").reshape(groups, n, d)
        c0 = np.fromfile(os.path.join(a.dir, name + ".c0.f32"), dtype="<f4").reshape(groups, k, d)
        times, cents = [], None
        for _ in range(a.repeats):
            t0, c0_cpu = time.perf_counter(), time.process_time()
            out = []
            for g in range(groups):  # faiss trains one problem at a time
                cp = faiss.ClusteringParameters()
                cp.niter = iters
                cp.max_points_per_centroid = 1 << 30  # every point, as kvlab
                cp.min_points_per_centroid = 1
                clus = faiss.Clustering(d, k, cp)
                faiss.copy_array_to_vector(c0[g].ravel(), clus.centroids)  # hot start
                clus.train(np.ascontiguousarray(xs[g]), faiss.IndexFlatL2(d))
                out.append(faiss.vector_to_array(clus.centroids).reshape(k, d))
            times.append((time.perf_counter() - t0, time.process_time() - c0_cpu))
            cents = out
        np.stack(cents).astype("<f4").tofile(os.path.join(a.dir, name + ".faiss.f32"))
        with open(os.path.join(a.dir, name + ".faiss.txt"), "w") as f:
            f.write("%s %d\n" % (faiss.__version__, a.threads))
            f.writelines("%.6f %.6f\n" % t for t in times)
        print("faiss %s: %s wall %s" % (faiss.__version__, name, " ".join("%.3f" % t[0] for t in times)), flush=True)


if __name__ == "__main__":
    main()
