# Operations for timing `ledger verify`: the import workload's shape (registrations, then subscriptions over 500
# topics), with unsubscriptions and sends to a topic mixed in. Seeded: both builds import the same file.
import random, sys
n = int(sys.argv[1]); random.seed(1)
instances = n // 10
out = sys.stdout
tok = lambda i: f"bench-{i}-abcdefghijklmnopqrstuvwxyz0123456789"
for i in range(instances):
    out.write(f'{{"op":"register","token":"{tok(i)}","platform":"ios","appId":"com.example"}}\n')
for _ in range(instances, n):
    r = random.random(); i = random.randrange(instances); t = random.randrange(500)
    if r < 0.80:
        out.write(f'{{"op":"subscribe","token":"{tok(i)}","topic":"topic-{t}","via":"iid"}}\n')
    elif r < 0.98:
        out.write(f'{{"op":"unsubscribe","token":"{tok(i)}","topic":"topic-{t}"}}\n')
    else:
        out.write(f'{{"op":"send","condition":"\'topic-{t}\' in topics","precedence":"standard","message":{{"data":{{"k":"v{i}"}}}}}}\n')
