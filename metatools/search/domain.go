package search

// domainRelated is the small API-domain table: words an agent uses for
// things REST APIs name otherwise, which WordNet does not relate
// (abbreviations, jargon, the objects of everyday verbs). Keys and values
// are lemmas; each value is a related term at domainWeight. It is written
// for APIs in general, never for one catalog.
var domainRelated = map[string][]string{
	"repo": {"repository"}, "repository": {"repo"}, "org": {"organization"}, "organisation": {"organization"},
	"organization": {"org", "company"}, "ticket": {"issue"}, "bug": {"issue"}, "pr": {"pull"}, "po": {"purchase"}, "mr": {"merge"},
	"dm": {"conversation", "message"}, "teammate": {"member", "collaborator", "user"},
	"coworker": {"member", "user"}, "colleague": {"member", "user"}, "people": {"user", "member"},
	"person": {"user", "member"}, "someone": {"user", "member"}, "everyone": {"user", "member"}, "member": {"user"},
	"login": {"username", "handle"}, "username": {"login", "handle"}, "handle": {"username"},
	"newest": {"latest", "recent"}, "latest": {"newest", "recent"}, "recent": {"latest"}, "last": {"latest"},
	"favourite": {"favorite", "star"}, "favorite": {"favourite", "star"}, "bookmark": {"star", "favorite"},
	"stargazer": {"star"}, "star": {"stargazer", "starred"}, "like": {"reaction", "star", "rating"}, "dislike": {"reaction", "rating"},
	"upvote": {"vote", "reaction"}, "emoji": {"reaction"}, "react": {"reaction"}, "reply": {"comment", "response"},
	"note": {"comment"}, "memo": {"note"}, "remark": {"comment"}, "config": {"configuration", "setting"},
	"configuration": {"setting", "config"}, "setting": {"configuration", "preference"}, "preference": {"setting"},
	"permission": {"access", "role", "scope"}, "access": {"permission"}, "credential": {"token", "key", "secret"},
	"token": {"key", "credential", "authorization"}, "password": {"credential", "secret"}, "avatar": {"photo", "image", "picture"},
	"picture": {"photo", "avatar", "image"}, "photo": {"avatar", "picture", "image"}, "image": {"avatar", "photo"},
	"customer": {"client", "contact"}, "client": {"customer", "contact"},
	"card": {"payment", "source"}, "pay": {"payment"}, "payment": {"charge"}, "charge": {"payment"},
	"bill": {"invoice"}, "invoice": {"bill"}, "discount": {"coupon", "promotion"}, "product": {"item"}, "coupon": {"discount"},
	"subscribe": {"subscription"}, "unsubscribe": {"subscription"}, "channel": {"conversation"},
	"conversation": {"channel"}, "thread": {"topic", "conversation", "discussion"}, "discussion": {"topic", "thread"}, "topic": {"thread"}, "chat": {"message", "conversation"}, "message": {"chat", "post"},
	"online": {"presence", "active"}, "offline": {"presence", "away"}, "away": {"presence"}, "status": {"state"},
	"state": {"status"}, "close": {"closed", "state", "transition"}, "reopen": {"open", "state", "transition"},
	"open": {"state"}, "resolve": {"resolution", "transition"},
	"approve": {"approval", "review", "approved", "moderation"}, "reject": {"decline", "deny"}, "deny": {"reject", "decline", "blocklist", "denylist"},
	"publish": {"draft", "published", "release"}, "unpublish": {"draft"}, "archive": {"archived"},
	"unarchive": {"archived", "archive"}, "restore": {"undelete", "recover", "trash"}, "undelete": {"restore", "recover"},
	"copy": {"duplicate", "clone"}, "duplicate": {"copy", "clone"}, "clone": {"copy", "fork"}, "fork": {"copy"},
	"rename": {"name"}, "log": {"audit", "history", "activity"}, "history": {"log", "changelog", "event", "activity"},
	"audit": {"log"}, "activity": {"event", "log"}, "event": {"activity"}, "rerun": {"run", "retry"},
	"retry": {"rerun"}, "trigger": {"dispatch", "run"}, "run": {"execute", "exec", "dispatch"}, "execute": {"run", "exec"},
	"exec": {"execute", "run", "command"}, "command": {"exec"},
	// pipeline → build: a CI pipeline's run is a build (Jenkins, Travis CI, CircleCI, Netlify).
	"job": {"task", "run"}, "task": {"job"}, "pipeline": {"workflow", "dag", "build"}, "workflow": {"pipeline", "dag"}, "dag": {"workflow", "pipeline"},
	"deploy": {"deployment"}, "hook": {"webhook"}, "webhook": {"hook", "subscription"}, "notification": {"alert", "hook"}, // hooks: Netlify's deploy notifications, GitLab's webhooks
	"alert": {"notification"}, "notify": {"notification"}, "email": {"mail", "send", "notify"},
	"mail": {"email"}, "text": {"message", "sms"}, "sms": {"message"}, "file": {"content", "upload", "object"},
	"content": {"file"}, "download": {"content", "file"}, "upload": {"file"}, "attachment": {"file"},
	"label": {"tag"}, "tag": {"label"}, "category": {"tag", "label"}, "group": {"team"},
	"id": {"identifier"}, "identifier": {"id"}, "count": {"total", "number"}, "total": {"count"},
	"number": {"count"}, "statistic": {"stats", "metric"}, "stats": {"statistic", "metric"}, "metric": {"stats"},
	"usage": {"metric", "stats"}, "quota": {"limit"}, "limit": {"quota", "rate"}, "plan": {"subscription", "price"},
	"price": {"plan"}, "assign": {"assignee"}, "assignee": {"assign"}, "owner": {"ownership"},
	"follow": {"following", "watch", "watcher", "subscribe"}, "watch": {"subscription", "watcher"}, "watcher": {"watch"}, "mute": {"ignore", "silence"}, "silence": {"mute"},
	"block": {"ban", "blocklist", "blacklist", "denylist"}, "ban": {"block", "suspend"},
	"allow": {"allowlist", "whitelist", "permission", "access"}, "allowlist": {"whitelist"}, "whitelist": {"allowlist"},
	"blocklist": {"blacklist", "denylist"}, "blacklist": {"blocklist", "denylist"}, "denylist": {"blocklist", "blacklist"},
	"appointment": {"booking", "reservation"}, "booking": {"appointment", "reservation"}, "reservation": {"booking"}, "invite": {"invitation"}, "join": {"member"},
	"leave": {"remove"}, "schedule": {"scheduled"},
	"renew": {"refresh"}, "cancel": {"cancellation"}, "stop": {"cancel", "disable"}, "pause": {"disable"}, "resume": {"enable"},
	"secret": {"credential"}, "key": {"token"}, "sign": {"auth"}, "auth": {"authentication"},
	"whoami": {"authenticated", "current"}, "many": {"bulk", "multiple", "batch"}, "multiple": {"bulk", "batch"},
	"batch": {"bulk", "multiple"}, "bulk": {"batch", "multiple"}, "several": {"bulk", "multiple"}, "profile": {"user"}, "account": {"user"},
	"every": {"all"}, "all": {"every"}, "cap": {"limit", "quota"},
	"autocomplete": {"typeahead", "suggestion"}, "typeahead": {"autocomplete", "suggestion"},
	"depend": {"dependency"}, "dependency": {"depend"},
	"activate": {"enable", "active"}, "deactivate": {"disable", "inactive", "close"}, "suspend": {"disable", "deactivate", "pause"},
	"enable": {"activate"}, "disable": {"deactivate", "suspend"},
	"active": {"status", "state"}, "inactive": {"status", "state"},
	"collaborator": {"contributor"}, "contributor": {"collaborator"},
	"scan": {"analysis", "analyze"}, "cve": {"vulnerability"}, "vulnerability": {"cve"},
	"automatically": {"rule", "timer", "automation", "auto"}, "automatic": {"rule", "timer", "automation", "auto"},
	"check": {"verify", "validate", "test"}, "validate": {"check"}, "verify": {"check"}, "test": {"check"}, "spec": {"specification"}, "specification": {"spec"}, "tracker": {"device"}, "gadget": {"device"}, "machine": {"node", "host", "server", "instance"}, "computer": {"node", "host", "server", "instance"}, "disk": {"volume", "storage"},
	"estimate": {"quote"}, "quote": {"estimate"}, "phone": {"contact"},
	"vendor": {"supplier", "provider", "manufacturer"}, "supplier": {"vendor", "provider"}, "provider": {"vendor", "supplier"},
	// Education APIs keep classes as courses (Google Classroom, Canvas, Moodle).
	"class": {"course"}, "course": {"class"},
	// Dashboards are made of panels (Grafana), widgets (Datadog) or cells (InfluxDB).
	"panel": {"cell", "widget"}, "widget": {"panel", "cell"},
	// One execution of a job, task or workflow is a run (Airflow's DAG runs, CI runs).
	"execution": {"run"},
	// A thing's administrators are its owners (InfluxDB's and Gitea's owners, GitHub's org admins).
	"admin": {"owner"}, "administrator": {"owner"},
	// Hosting APIs keep websites as sites (Netlify, Vercel, Webflow, WordPress.com).
	"website": {"site"},
	// A var is a variable ("env var", "config var").
	"var": {"variable"},
	// A release of a site or an app is a deploy (Netlify's and Vercel's deploys, Heroku's releases).
	"release": {"deploy", "deployment"},
	// A domain's DNS is kept as a zone (Netlify's DNS zones, Route 53's hosted zones, Cloudflare's zones).
	"domain": {"zone"},
	// An add-on is a service, plugin, extension or integration (Netlify's and Heroku's add-on services).
	"addon": {"service", "plugin", "extension", "integration"},
	// A script injected into a site's pages is a snippet (Netlify's and Webflow's snippets of custom code).
	"script": {"snippet"},
	// Pinning a deploy or a version keeps it live: the API locks it (Netlify locks a deploy).
	"pin": {"lock"},
	// Hosting and SaaS APIs keep a team as an account (Netlify, Vercel, Heroku).
	"team": {"group", "account"},
	// Subtitles are captions (YouTube's caption tracks, Vimeo's and Mux's text tracks of captions).
	"subtitle": {"caption"},
	// A video's or a playlist's cover or preview picture is its thumbnail (YouTube, Vimeo, Mux, Spotify's covers).
	"cover": {"thumbnail"}, "preview": {"thumbnail"},
	// Flagging a thing reports it (YouTube's abuse reports, GitHub's reported content, Discourse's flags).
	"flag": {"report"},
	// A genre is a category (YouTube's video categories, podcast and music categories).
	"genre": {"category"},
	// To connect one thing to another is to bind, link or attach it (YouTube binds a broadcast to a stream).
	"connect": {"bind", "link", "attach"},
	// What a thing has done lately is its recent activity (YouTube's and GitHub's activity feeds).
	"lately": {"recent", "activity"},
	// Hiding a comment or a post is moderation (YouTube's comment moderation status, forums' hidden posts).
	"hide": {"hidden", "moderation"},
	// A cert is a certificate; an SSL or TLS one is what hosting, CDN and key-management APIs keep as certificates.
	"cert": {"certificate"}, "ssl": {"certificate", "tls"}, "tls": {"certificate", "ssl"},
	// What sits in the trash or the recycle bin has been deleted and can come back (Box's trashed items, soft-deleted secrets).
	"trash": {"delete", "deleted"},
	// Deleting a thing for good or forever is a permanent deletion: a purge (soft-delete APIs: Key Vault, Azure, GCP's KMS).
	"forever": {"permanently", "purge"},
	// Undoing a change or a deletion reverts or recovers what it changed or deleted (soft-delete recovery, a deploy's rollback).
	"undo": {"revert", "recover", "restore", "undelete"},
	// A signer is a recipient of what is sent for signing (DocuSign's, Dropbox Sign's and Adobe Sign's recipients).
	"signer": {"recipient"}, "signatory": {"signer", "recipient"},
	// A link an API hands out is a URL (DocuSign's views, presigned and share URLs).
	"link": {"url"},
	// Acting on someone's behalf is a delegated authorization (DocuSign's user authorizations, Gmail's delegates).
	"behalf": {"authorization", "delegate", "agent"},
	// A drive (Google Drive, Microsoft's) is a cloud storage provider.
	"drive": {"storage", "cloud"},
	// A screen of an app is a view of its UI (DocuSign's sender and recipient views).
	"screen": {"view", "ui"},
	// A contract or an agreement sent for signing is a document (DocuSign's envelopes' documents, Adobe Sign's agreements).
	"contract": {"agreement", "document"}, "agreement": {"contract", "document"},
	// A bank's or a ledger's transactions are its payments (bunq's, Plaid's and open-banking payments).
	"transaction": {"payment"},
	// What recurs is run on a schedule (bunq's scheduled payments, cron-like schedules of jobs and reports).
	"recurring": {"schedule", "scheduled"}, "recur": {"schedule", "scheduled"},
	// A sum in euros, dollars or pounds is an amount of a currency (payments, conversions, exchange rates).
	"euro": {"currency", "amount"}, "dollar": {"currency", "amount"}, "pound": {"currency", "amount"},
	// Network gear is what inventory and monitoring APIs keep as devices (NetBox, Meraki, LibreNMS, Nautobot).
	"router": {"device"}, "switch": {"device"}, "firewall": {"device"},
	// A VM is a virtual machine; a NIC is a machine's network interface.
	"vm": {"virtual", "machine"}, "nic": {"interface"},
	// An IP network is kept as a prefix (NetBox's and Nautobot's prefixes, BGP and route tables), a cabinet as a
	// rack, a telecom carrier as a provider, and hardware comes from its manufacturer.
	"subnet": {"prefix"}, "cabinet": {"rack"}, "carrier": {"provider"},
}

// domainPhrases are two-word expressions that mean one thing; their words
// (as lemmas) are replaced by these terms at these weights.
var domainPhrases = map[[2]string][]weighted{
	{"log", "in"}:         {{"login", 1}, {"authenticated", 0.7}, {"current", 0.6}, {"session", 0.5}},
	{"sign", "in"}:        {{"login", 1}, {"authenticated", 0.7}, {"current", 0.6}, {"session", 0.5}},
	{"log", "out"}:        {{"logout", 1}, {"session", 0.5}},
	{"sign", "out"}:       {{"logout", 1}, {"session", 0.5}},
	{"log", "off"}:        {{"logout", 1}, {"session", 0.5}},
	{"user", "name"}:      {{"username", 1}, {"login", 0.7}},
	{"pull", "request"}:   {{"pull", 1}},
	{"direct", "message"}: {{"conversation", 0.7}, {"dm", 0.7}, {"im", 0.7}},
	{"time", "zone"}:      {{"timezone", 1}},
	{"e", "mail"}:         {{"email", 1}},
	{"work", "out"}:       {{"calculate", 1}, {"compute", 0.7}, {"estimate", 0.5}},
	{"take", "away"}:      {{"revoke", 1}, {"remove", 0.7}},
	{"bring", "back"}:     {{"restore", 1}, {"undelete", 0.7}, {"recover", 0.7}},
	{"at", "once"}:        {{"bulk", 0.7}, {"batch", 0.7}, {"multiple", 0.5}, {"collection", 0.5}},
	{"thumb", "up"}:       {{"like", 1}, {"rating", 0.7}, {"reaction", 0.7}},
	{"thumb", "down"}:     {{"dislike", 1}, {"rating", 0.7}, {"reaction", 0.7}},
	{"how", "many"}:       {{"count", 0.5}, {"total", 0.35}, {"number", 0.3}, {"statistic", 0.3}},
	{"how", "much"}:       {{"total", 0.5}, {"statistic", 0.3}},
	{"how", "long"}:       {{"length", 0.5}, {"duration", 0.5}},
	{"how", "far"}:        {{"progress", 0.5}, {"status", 0.3}},
	{"who", "can"}:        {{"permission", 0.5}, {"access", 0.4}},
	// A certificate authority is the issuer of certificates (Key Vault's certificate issuers, cert-manager's Issuers, ACME CAs).
	{"for", "good"}:                {{"permanently", 1}, {"purge", 0.7}},
	{"recycle", "bin"}:             {{"delete", 1}, {"trash", 0.7}},
	{"certificate", "authority"}:   {{"certificate", 1}, {"issuer", 1}, {"authority", 0.5}},
	{"certificate", "authorities"}: {{"certificate", 1}, {"issuer", 1}, {"authority", 0.5}},
	// An address book is a list of contacts (DocuSign's, Google's and Microsoft Graph's contacts).
	{"address", "book"}: {{"contact", 1}},
	// A data center is a site (NetBox's and DCIM tools' sites); a network or switch port is an interface; an
	// operating system is a platform (NetBox's platforms, CI runners' and device fleets' platforms).
	{"data", "center"}:     {{"site", 1}, {"datacenter", 0.7}},
	{"network", "port"}:    {{"interface", 1}, {"port", 0.5}},
	{"network", "ports"}:   {{"interface", 1}, {"port", 0.5}},
	{"switch", "port"}:     {{"interface", 1}, {"port", 0.5}},
	{"switch", "ports"}:    {{"interface", 1}, {"port", 0.5}},
	{"operate", "system"}:  {{"platform", 1}, {"os", 0.7}},
	{"operate", "systems"}: {{"platform", 1}, {"os", 0.7}},
}

// questionTerms are what a question word asks about: "who" asks for people.
var questionTerms = map[string][]weighted{
	"who":   {{"user", 0.5}, {"member", 0.4}, {"people", 0.4}, {"participant", 0.4}, {"contact", 0.4}},
	"whom":  {{"user", 0.5}, {"member", 0.4}},
	"whose": {{"user", 0.4}, {"owner", 0.4}},
	"when":  {{"date", 0.4}, {"time", 0.4}},
	"where": {{"location", 0.4}, {"position", 0.4}, {"place", 0.3}},
}

// domainWeight is the query weight of a domainRelated term.
const domainWeight = 0.7
