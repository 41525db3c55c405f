import multiprocessing as mp, time, sys
def probe(secs, q):
    t_end = time.perf_counter_ns() + int(secs * 1e9)
    last = time.perf_counter_ns(); gaps = []
    while True:
        now = time.perf_counter_ns()
        g = now - last
        if g > 50_000: gaps.append(g)
        last = now
        if now > t_end: break
    q.put(gaps)
if __name__ == "__main__":
    n = int(sys.argv[1]); secs = float(sys.argv[2])
    q = mp.Queue(); ps = [mp.Process(target=probe, args=(secs, q)) for _ in range(n)]
    [p.start() for p in ps]; res = [q.get() for _ in ps]; [p.join() for p in ps]
    allg = sorted(g for r in res for g in r)
    print(f"{n} spinning processes, {secs} s: gaps > 50 us: {len(allg)}; > 200 us: {sum(g > 200_000 for g in allg)}; > 1 ms: {sum(g > 1_000_000 for g in allg)}; largest (us): {[round(g/1e3) for g in allg[-8:]]}")
