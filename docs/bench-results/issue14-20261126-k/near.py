import re,collections,sys,subprocess
f=sys.argv[1]; rate=float(sys.argv[2]); thread=sys.argv[3]; secs=5.0
text=open(f).read().split('\n\n')
skip=re.compile(r'^(swift_|_swift|swift::|__|_int_|malloc|free|cfree|getCache|tryCast|\$ss|\$sS|\$s20Foundation|\[unknown\]|lll_|pthread|_raw|finish_task|\w+_\w+\.isra|memcpy|memmove|do_|entry_|syscall)')
c=collections.Counter()
for s in text:
    lines=s.strip().split('\n')
    if len(lines)<2 or thread not in lines[0]: continue
    name='?'
    for l in lines[1:]:
        parts=l.strip().split(' ',1)
        if len(parts)<2: continue
        sym=re.sub(r'\+0x[0-9a-f]+','',parts[1].rsplit(' (',1)[0])
        if '[kernel' in l: continue
        if skip.match(sym): continue
        name=sym; break
    c[name]+=1
n=rate*secs
names=list(c.keys())
dem=subprocess.run(['swift','demangle','--simplified','--compact'],input='\n'.join(names),capture_output=True,text=True).stdout.split('\n')
m=dict(zip(names,dem))
tot=sum(c.values()); print(f"{thread}: {tot/n*1000:.1f} us/req")
for k,v in c.most_common(int(sys.argv[4]) if len(sys.argv)>4 else 30): print(f"{v/n*1000:6.2f}  {m.get(k,k)[:150]}")
