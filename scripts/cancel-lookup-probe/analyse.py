import sys,re,collections
for path in sys.argv[1:]:
    ev=collections.defaultdict(list); lines=[]
    for line in open(path, errors='replace'):
        m=re.match(r'^([\d.]+) (R|C0|C1|L0|L1|D) (\d+)(?: (-?\d+))?$', line.strip())
        if m:
            t,k,i,code=float(m[1]),m[2],int(m[3]),m[4]
            ev[i].append((t,k,code)); lines.append((t,k,i,code))
    # tasks whose cancel returned before the lookup's answer returned, and that completed without error before it returned
    suspects=[]
    for i,e in ev.items():
        d={k:(t,c) for t,k,c in e}
        if 'C1' in d and 'L1' in d and 'D' in d and d['C1'][0] < d['L1'][0] and d['D'][1]=='0' and d['D'][0] < d['L1'][0]:
            suspects.append(i)
    pending=[i for i,e in ev.items() if 'C1' in {k for _,k,_ in e} and 'L0' in {k for _,k,_ in e} and 'L1' not in {k for _,k,_ in e}]
    last=lines[-1] if lines else None
    print(f"{path}: tasks {len(ev)}; cancel returned while lookup pending: {sum(1 for i,e in ev.items() if 'C1' in dict((k,t) for t,k,c in e) and ('L1' not in dict((k,t) for t,k,c in e) or dict((k,t) for t,k,c in e)['C1'] < dict((k,t) for t,k,c in e)['L1']))}; "
          f"of those completed (no error) before the answer returned: {suspects}; answer entered, never returned: {pending}; last event {last}")
    for i in suspects+pending:
        print("   task", i, " ".join(f"{k}{'('+c+')' if c else ''}@{t:.3f}" for t,k,c in sorted(ev[i])))
