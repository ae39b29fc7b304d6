import Mustache

/// The console's pages: mustache templates compiled into the binary (no files to find at run time, no
/// network fonts or scripts). `{{value}}` is HTML-escaped (`& < > " '`), so user input — app ids, topic
/// names, message data — is shown as text; the templates never use the unescaped `{{{…}}}` form.
enum ConsoleTemplates {
    static func library() throws -> MustacheLibrary {
        var library = MustacheLibrary()
        for (name, text) in templates { try library.register(text, named: name) }
        return library
    }

    static let templates: [(String, String)] = [
        ("header", header), ("footer", footer), ("sign-in", signIn), ("overview", overview),
        ("messages", messages), ("message", message), ("not-found", notFound), ("device", device),
        ("topics", topics), ("topic", topic), ("log", log),
    ]

    static let header = """
        <!doctype html>
        <html lang="en">
        <head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>{{title}} · TopicLedger audit</title>
        <link rel="stylesheet" href="/console/static/console.css">
        <link rel="icon" href="/console/static/icon.svg" type="image/svg+xml"></head>
        <body>
        <header class="bar"><a class="brand" href="/console">TopicLedger audit</a>
        {{#signedIn}}<nav aria-label="Console"><a href="/console">Overview</a> <a href="/console/messages">Messages</a> <a href="/console/devices">Devices</a> <a href="/console/topics">Topics</a> <a href="/console/log">Log</a></nav>
        <span class="who">{{project}} · {{role}}</span>
        <form method="post" action="/console/sign-out"><button type="submit">Sign out</button></form>{{/signedIn}}
        </header>
        <main>

        """

    static let footer = """
        </main>
        </body>
        </html>

        """

    static let signIn = """
        {{> header}}
        {{#content}}
        <h1>Sign in</h1>
        {{#error}}<p class="error" role="alert">{{error}}</p>{{/error}}
        <form method="post" action="/console/sign-in" class="sign-in">
        <label for="key">Auditor or admin key</label>
        <input id="key" name="key" type="password" autocomplete="current-password" required autofocus>
        <button type="submit">Sign in</button>
        </form>
        <p class="hint">The key is sent once, in the body of this form. The console keeps a session cookie for
        8 hours, never the key.</p>
        {{/content}}
        {{> footer}}
        """

    static let overview = """
        {{> header}}
        {{#content}}
        <h1>Project {{project}}</h1>
        <dl class="facts">
        <dt>Head</dt><dd>seq {{events}}{{#headTime}} at <time>{{headTime}}</time>{{/headTime}}</dd>
        <dt>Head hash</dt><dd><code>{{headHash}}</code></dd>
        <dt>Devices</dt><dd>{{registered}} registered ({{instances}} ever)</dd>
        <dt>Topics</dt><dd>{{topics}}</dd>
        <dt>Subscriptions</dt><dd>{{subscriptions}}</dd>
        <dt>Messages</dt><dd><a href="/console/messages">{{messages}}</a></dd>
        </dl>
        <h2>Last signed checkpoint</h2>
        {{#checkpoint}}<p>Covers the first {{size}} events. Check it, and proofs against it, with the public key alone
        (<code>ledger verify-proof</code>, <code>tools/merkle/verify_proof.py</code>):</p>
        <pre class="json">{{note}}</pre>{{/checkpoint}}
        {{^checkpoint}}<p>None yet: the server signs one when asked (<code>ledger checkpoint</code>, <code>GET …/ledger:checkpoint</code>) and when it stops.</p>{{/checkpoint}}
        {{/content}}
        {{> footer}}
        """

    static let messages = """
        {{> header}}
        {{#content}}
        <h1>Messages</h1>
        <form method="get" action="/console/messages" class="filters">
        <label>Target contains <input name="target" value="{{target}}"></label>
        <label>Sent from <input name="from" value="{{from}}" placeholder="2026-11-01T00:00:00Z"></label>
        <label>until <input name="to" value="{{to}}" placeholder="2026-12-01T00:00:00Z"></label>
        <button type="submit">Filter</button>
        </form>
        {{#error}}<p class="error" role="alert">{{error}}</p>{{/error}}
        <table>
        <thead><tr><th scope="col">Sent</th><th scope="col">Message</th><th scope="col">Target</th><th scope="col">Recipients</th></tr></thead>
        <tbody>
        {{#sends}}<tr><td><time>{{time}}</time></td><td><a href="/console/messages/{{messageID}}">{{messageID}}</a></td><td>{{kind}} <code>{{target}}</code></td><td class="num">{{recipients}}</td></tr>
        {{/sends}}
        {{^sends}}<tr><td colspan="4">No messages here.</td></tr>{{/sends}}
        </tbody>
        </table>
        {{#next}}<p><a rel="next" href="{{next}}">Older messages</a></p>{{/next}}
        {{/content}}
        {{> footer}}
        """

    static let message = """
        {{> header}}
        {{#content}}
        <h1>Message {{messageID}}</h1>
        {{#matches}}<p class="badge ok">Matches: the replayed recipients are the audience recorded when it was sent</p>{{/matches}}
        {{^matches}}<p class="badge bad">{{verdict}}</p>{{/matches}}
        <dl class="facts">
        <dt>Sent</dt><dd>seq {{seq}} at <time>{{time}}</time></dd>
        <dt>Target</dt><dd>{{kind}} <code>{{target}}</code></dd>
        <dt>Rule</dt><dd>{{rule}}</dd>
        <dt>Recipients, replayed</dt><dd>{{recipientCount}} · digest <code>{{replayDigest}}</code></dd>
        <dt>Recorded at send time</dt><dd>{{#recorded}}{{recordedCount}} · digest <code>{{recordedDigest}}</code> (audience event at seq {{audienceSeq}}){{/recorded}}{{^recorded}}not recorded yet{{/recorded}}</dd>
        <dt>Acknowledged</dt><dd>{{acknowledgedCount}} of {{recipientCount}}</dd>
        {{#pushCounts}}<dt>APNs pushes</dt><dd>{{accepted}} accepted · {{unregistered}} unregistered · {{failed}} failed · {{pending}} pending · {{expired}} expired</dd>{{/pushCounts}}
        </dl>
        <p><a href="/console/messages/{{messageID}}/recipients.csv">Download the recipients (CSV, as <code>ledger replay --format csv</code>)</a></p>
        <h2>Recipients {{firstShown}}–{{lastShown}} of {{recipientCount}}</h2>
        <table>
        <thead><tr><th scope="col">Registration token</th><th scope="col">Acknowledged</th><th scope="col">APNs</th></tr></thead>
        <tbody>
        {{#recipients}}<tr><td><code>{{token}}</code></td><td>{{#acknowledged}}<span class="ack">acknowledged</span>{{/acknowledged}}{{^acknowledged}}not yet{{/acknowledged}}</td><td>{{push}}</td></tr>
        {{/recipients}}
        </tbody>
        </table>
        {{#next}}<p><a rel="next" href="{{next}}">Next recipients</a></p>{{/next}}
        <h2>The message as accepted</h2>
        {{#contentForgotten}}<p class="forgotten">{{contentForgotten}}</p>{{/contentForgotten}}
        <pre class="json">{{messageJSON}}</pre>
        {{/content}}
        {{> footer}}
        """

    static let device = """
        {{> header}}
        {{#content}}
        <h1>Devices</h1>
        <form method="get" action="/console/devices" class="filters">
        <label>Registration token <input name="token" value="{{token}}" size="60" required></label>
        <label>Topics at <input name="at" value="{{at}}" placeholder="now, or 2026-11-01T00:00:00Z"></label>
        <button type="submit">Look up</button>
        </form>
        {{#error}}<p class="error" role="alert">{{error}}</p>{{/error}}
        {{#audit}}
        <h2>Device</h2>
        <dl class="facts">
        <dt>Token</dt><dd><code>{{token}}</code></dd>
        <dt>Platform</dt><dd>{{platform}}</dd>
        <dt>App id</dt><dd><code>{{appId}}</code></dd>
        <dt>Registered at the moment</dt><dd>{{#registered}}yes{{/registered}}{{^registered}}no{{/registered}}</dd>
        <dt>Topics at seq {{atSeq}}{{#atTime}} ({{atTime}}){{/atTime}}</dt><dd>{{#topics}}<a href="/console/topics/{{encoded}}">{{name}}</a> {{/topics}}{{^topics}}none{{/topics}}</dd>
        <dt>Acknowledged through</dt><dd>seq {{acknowledgedThroughSeq}}</dd>
        </dl>
        {{#hasAPNsTokens}}<h2>APNs tokens</h2>
        <table><thead><tr><th scope="col">APNs token</th><th scope="col">From</th><th scope="col">Until</th></tr></thead><tbody>
        {{#apnsTokens}}<tr><td><code>{{apnsToken}}</code>{{#sandbox}} (sandbox){{/sandbox}}</td><td>seq {{fromSeq}} · <time>{{fromTime}}</time></td><td>{{#untilSeq}}seq {{untilSeq}} · <time>{{untilTime}}</time>{{/untilSeq}}{{^untilSeq}}held now{{/untilSeq}}</td></tr>
        {{/apnsTokens}}
        </tbody></table>{{/hasAPNsTokens}}
        <h2>Registrations</h2>
        <table><thead><tr><th scope="col">From</th><th scope="col">Until</th></tr></thead><tbody>
        {{#registrations}}<tr><td>seq {{fromSeq}} · <time>{{fromTime}}</time></td><td>{{#untilSeq}}seq {{untilSeq}} · <time>{{untilTime}}</time>{{/untilSeq}}{{^untilSeq}}still registered{{/untilSeq}}</td></tr>
        {{/registrations}}
        </tbody></table>
        <h2>Subscription history</h2>
        <table><thead><tr><th scope="col">Topic</th><th scope="col">From</th><th scope="col">Until</th></tr></thead><tbody>
        {{#subscriptions}}<tr><td><code>{{topic}}</code></td><td>seq {{fromSeq}} · <time>{{fromTime}}</time></td><td>{{#untilSeq}}seq {{untilSeq}} · <time>{{untilTime}}</time>{{/untilSeq}}{{^untilSeq}}still subscribed{{/untilSeq}}</td></tr>
        {{/subscriptions}}
        {{^subscriptions}}<tr><td colspan="3">None.</td></tr>{{/subscriptions}}
        </tbody></table>
        <h2>Deliveries ({{deliveryCount}}, newest first{{#deliveriesCut}}, the newest {{shownDeliveries}} shown{{/deliveriesCut}})</h2>
        <table><thead><tr><th scope="col">Sent</th><th scope="col">Message</th><th scope="col">Target</th><th scope="col">Acknowledged</th><th scope="col">APNs</th></tr></thead><tbody>
        {{#deliveries}}<tr><td><time>{{time}}</time></td><td><a href="/console/messages/{{messageId}}">{{messageId}}</a></td><td>{{kind}} <code>{{target}}</code></td><td>{{#acknowledged}}<span class="ack">acknowledged</span>{{/acknowledged}}{{^acknowledged}}not yet{{/acknowledged}}</td><td>{{push}}</td></tr>
        {{/deliveries}}
        {{^deliveries}}<tr><td colspan="5">None.</td></tr>{{/deliveries}}
        </tbody></table>
        {{/audit}}
        {{/content}}
        {{> footer}}
        """

    static let topics = """
        {{> header}}
        {{#content}}
        <h1>Topics</h1>
        <p>Sorted by {{#byName}}name · <a href="/console/topics?order=subscribers">sort by subscribers</a>{{/byName}}{{^byName}}subscribers · <a href="/console/topics?order=name">sort by name</a>{{/byName}}</p>
        <table><thead><tr><th scope="col">Topic</th><th scope="col">Subscribers now</th></tr></thead><tbody>
        {{#topics}}<tr><td><a href="/console/topics/{{encoded}}">{{name}}</a></td><td class="num">{{subscribers}}</td></tr>
        {{/topics}}
        {{^topics}}<tr><td colspan="2">No topics yet.</td></tr>{{/topics}}
        </tbody></table>
        {{#next}}<p><a rel="next" href="{{next}}">More topics</a></p>{{/next}}
        {{/content}}
        {{> footer}}
        """

    static let topic = """
        {{> header}}
        {{#content}}
        <h1>Topic <code>{{name}}</code></h1>
        <form method="get" action="/console/topics/{{encoded}}" class="filters">
        <label>Members at <input name="at" value="{{at}}" placeholder="now, or 2026-11-01T00:00:00Z"></label>
        <button type="submit">Show</button>
        </form>
        {{#error}}<p class="error" role="alert">{{error}}</p>{{/error}}
        <h2>Subscribers over time</h2>
        <figure>{{{chart}}}<figcaption>{{chartCaption}}</figcaption></figure>
        <h2>{{count}} members at seq {{atSeq}}{{#atTime}} ({{atTime}}){{/atTime}}</h2>
        <table><thead><tr><th scope="col">Registration token</th></tr></thead><tbody>
        {{#members}}<tr><td><a href="/console/devices?token={{.}}"><code>{{.}}</code></a></td></tr>
        {{/members}}
        {{^members}}<tr><td>None.</td></tr>{{/members}}
        </tbody></table>
        {{#next}}<p><a rel="next" href="{{next}}">More members</a></p>{{/next}}
        {{/content}}
        {{> footer}}
        """

    static let log = """
        {{> header}}
        {{#content}}
        <h1>The log</h1>
        <form method="get" action="/console/log" class="filters">
        <label>Kind <select name="kind">{{#kinds}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/kinds}}</select></label>
        <label>Token <input name="token" value="{{token}}"></label>
        <label>Topic <input name="topic" value="{{topic}}"></label>
        <label>From seq <input name="from" value="{{from}}" inputmode="numeric" size="8"></label>
        <label>to seq <input name="to" value="{{to}}" inputmode="numeric" size="8"></label>
        <button type="submit">Filter</button>
        </form>
        {{#error}}<p class="error" role="alert">{{error}}</p>{{/error}}
        <table class="log"><thead><tr><th scope="col">Seq</th><th scope="col">Time</th><th scope="col">Kind</th><th scope="col">Event</th><th scope="col">Hash / previous hash</th></tr></thead><tbody>
        {{#events}}<tr><td class="num">{{seq}}</td><td><time>{{time}}</time></td><td>{{kind}}</td><td><code>{{detail}}</code></td><td><code>{{hash}}</code><br><code class="prev">{{previous}}</code></td></tr>
        {{/events}}
        {{^events}}<tr><td colspan="5">No events here.</td></tr>{{/events}}
        </tbody></table>
        {{#next}}<p><a rel="next" href="{{next}}">Later events</a></p>{{/next}}
        {{/content}}
        {{> footer}}
        """

    static let notFound = """
        {{> header}}
        {{#content}}
        <h1>Not found</h1>
        <p>{{detail}}</p>
        {{/content}}
        {{> footer}}
        """

    static let icon = """
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#2557a7"/><path d="M4 4h8M8 4v9" stroke="#fff" stroke-width="2"/></svg>
        """

    static let css = """
        :root { color-scheme: light dark; --accent: #2557a7; --ok: #1d7a3a; --bad: #b3261e; }
        body { font: 15px/1.45 system-ui, sans-serif; margin: 0; }
        .bar { display: flex; gap: 1.5em; align-items: center; padding: .6em 1.2em; border-bottom: 1px solid #8884; }
        .bar form { margin-left: auto; }
        .brand { font-weight: 600; text-decoration: none; }
        main { padding: 1em 1.2em; max-width: 80em; }
        a { color: var(--accent); }
        a:focus, button:focus, input:focus { outline: 3px solid var(--accent); outline-offset: 2px; }
        code, pre { font: 13px/1.4 ui-monospace, monospace; overflow-wrap: anywhere; }
        pre.json { white-space: pre-wrap; background: #8881; padding: .8em; }
        table { border-collapse: collapse; width: 100%; }
        th, td { text-align: left; padding: .3em .6em; border-bottom: 1px solid #8883; vertical-align: top; }
        td.num { text-align: right; }
        .facts { display: grid; grid-template-columns: max-content 1fr; gap: .3em 1.2em; }
        .facts dt { font-weight: 600; }
        .facts dd { margin: 0; }
        .badge { display: inline-block; padding: .3em .7em; border-radius: .3em; color: #fff; font-weight: 600; }
        .badge.ok { background: var(--ok); }
        .badge.bad { background: var(--bad); }
        .ack { color: var(--ok); font-weight: 600; }
        .error { color: var(--bad); font-weight: 600; }
        .filters { display: flex; flex-wrap: wrap; gap: .8em; align-items: end; margin-bottom: 1em; }
        .sign-in { display: grid; gap: .5em; max-width: 24em; }
        .hint { color: #888; }
        figure { margin: 0 0 1em; }
        svg.chart { width: 100%; max-width: 60em; height: auto; }
        code.prev { color: #888; }
        table.log code { font-size: 12px; }
        """
}
