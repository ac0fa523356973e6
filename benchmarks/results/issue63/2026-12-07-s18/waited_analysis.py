import json,sys,numpy as np
for f in sys.argv[1:]:
    t=json.load(open(f)); rows=t['rows']
    T=np.array([np.median(r['times_s']) for r in rows]); W=np.array([np.median(r['waited_s']) for r in rows])
    top=np.argsort(T)[:10]
    best=T.min()
    pick=top[np.argmin(W[top])]
    print(f, 'choose among the 10 fastest by waited: step %.4f vs best %.4f (%.1f%% slower)'%(T[pick],best,100*(T[pick]/best-1)))
    # relative noise: within-row CV of step vs of waited in top 10
    cs=[np.std(rows[i]['times_s'],ddof=1)/np.mean(rows[i]['times_s']) for i in top]
    sd_t=[np.std(rows[i]['times_s'],ddof=1) for i in top]; sd_w=[np.std(rows[i]['waited_s'],ddof=1) for i in top]
    print('  top10: median sd step %.2f ms, waited %.2f ms; CV step %.1f%%; median waited share of step %.0f%%'%(1e3*np.median(sd_t),1e3*np.median(sd_w),100*np.median(cs),100*np.median(W[top]/T[top])))
    # correlation of per-iteration step and waited deviations within rows
    dt=[];dw=[]
    for r in rows:
        a=np.array(r['times_s']);b=np.array(r['waited_s']); dt+=list(a-a.mean()); dw+=list(b-b.mean())
    dt=np.array(dt);dw=np.array(dw)
    print('  within rows: var(step)=%.2e var(waited)=%.2e var(step-waited)=%.2e corr=%.2f'%(dt.var(),dw.var(),(dt-dw).var(),np.corrcoef(dt,dw)[0,1]))
