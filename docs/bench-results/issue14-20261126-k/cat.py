import re,collections,sys
f=sys.argv[1]; rate=float(sys.argv[2]); secs=5.0
text=open(f).read().split('\n\n')
cats=[('writeSyscall',r'sys_writev|sys_write\b|__x64_sys_writev|__x64_sys_write|tcp_sendmsg'),
('readSyscall',r'__x64_sys_read|tcp_recvmsg'),
('epoll',r'epoll_wait|__x64_sys_epoll'),
('eventfd',r'eventfd'),
('httpDecode',r'HTTPDecoder|llhttp|BetterHTTPParser'),
('h1ToTypes',r'HTTP1ToHTTPServerCodec'),
('asyncChanRead',r'NIOAsyncChannelHandler.*(channelRead|_deliverReads)|channelReadComplete'),
('asyncChanWrite',r'NIOAsyncChannelHandler.*(Outbound|_doOutboundWrites)|NIOAsyncWriter|write0|flush0'),
('idle',r'IdleStateHandler'),
('limiter',r'ConnectionLimiter'),
('scheduleTasks',r'SelectableEventLoop.*(run|execute)'),
]
def th(s):
    return s.split()[0]
bythread=collections.defaultdict(collections.Counter)
for s in text:
    lines=s.strip().split('\n')
    if len(lines)<2: continue
    t=th(lines[0])
    if 'NIO' in t: t='loops'
    elif 'default-qos' in t: t='pool'
    stack='\n'.join(lines[1:])
    cat='other'
    for name,pat in cats:
        if re.search(pat,stack): cat=name; break
    bythread[t][cat]+=1
n=rate*secs
for t,c in bythread.items():
    tot=sum(c.values())
    print(f"{t}: {tot/n*1000:.1f} us/req")
    for k,v in c.most_common(): print(f"   {k:15s} {v/n*1000:6.2f}")
