import re,sys,statistics as st
rows={}
for line in open(sys.argv[1]):
    m=re.match(r'(\S+) (\S+) round (\d+) (\S+): fabxfer (\S+) s/version \((\S+) GB/s\), naive (\S+)',line)
    if not m: continue
    model,prov,r,mode,s,g,n=m.groups()
    model=model.replace('hf:../bench/configs/','').replace('.json','')
    rows.setdefault((model,prov),{}).setdefault(mode,[]).append(float(s))
print("%-22s %-12s %-10s %-26s %s"%("model","provider","mode","s/version (rounds)","median vs off"))
for (model,prov),d in rows.items():
    off=st.median(d['off'])
    for mode,v in d.items():
        print("%-22s %-12s %-10s %-26s %+.1f %%"%(model,prov,mode," ".join("%.3f"%x for x in v),(st.median(v)/off-1)*100))
