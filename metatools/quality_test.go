package metatools

import (
	"context"
	"math"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/codemode-gateway/caddy-codemode/broker/catalog"
)

// sendgridDoc locates the SendGrid v3 OpenAPI document (334 operations) that
// ships as test data inside the kin-openapi module (MIT), so the quality test
// runs offline from the module cache.
func sendgridDoc(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/getkin/kin-openapi").Output()
	if err != nil {
		t.Fatalf("locating kin-openapi: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "openapi3", "testdata", "oai_v3_stoplight.json")
}

var nonWord = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// qualityCases are natural-language requests written without looking at the
// ranking, each with the operation(s) that fulfil it (several when the API
// has duplicates, e.g. legacy and new contacts endpoints).
var qualityCases = []struct {
	query string
	want  []string
}{
	{"show every alert configured on my account", []string{"GET_alerts"}},
	{"set up a new usage alert", []string{"POST_alerts"}},
	{"remove an alert", []string{"DELETE_alerts_alert_id"}},
	{"change an existing alert", []string{"PATCH_alerts_alert_id"}},
	{"list my api keys", []string{"GET_api_keys"}},
	{"generate a new API key", []string{"create_api_keys"}},
	{"revoke an api key", []string{"DELETE_api_keys_api_key_id"}},
	{"rename an api key", []string{"PATCH_api_keys_api_key_id", "PUT_api_keys_api_key_id"}},
	{"allow an IP address to access my account", []string{"POST_access_settings_whitelist"}},
	{"recent login attempts to my account", []string{"GET_access_settings_activity"}},
	{"create an unsubscribe group", []string{"POST_asm_groups"}},
	{"list all campaigns", []string{"GET_campaigns"}},
	{"send a campaign right now", []string{"POST_campaigns_campaign_id_schedules_now"}},
	{"schedule a campaign for later", []string{"POST_campaigns_campaign_id_schedules"}},
	{"send a test version of a campaign", []string{"POST_campaigns_campaign_id_schedules_test"}},
	{"unschedule a campaign", []string{"DELETE_campaigns_campaign_id_schedules"}},
	{"email statistics by browser", []string{"GET_browsers_stats"}},
	{"stats broken down by country", []string{"GET_geo_stats"}},
	{"email statistics per device type", []string{"GET_devices_stats"}},
	{"create a custom field for contacts", []string{"POST_contactdb_custom_fields", "POST_mc_field_definitions"}},
	{"add a recipient to a list", []string{"POST_contactdb_lists_list_id_recipients_recipient_id", "POST_contactdb_lists_list_id_recipients"}},
	{"how many recipients are billable", []string{"GET_contactdb_recipients_billable_count"}},
	{"total number of contacts", []string{"GET_mc_contacts_count", "GET_contactdb_recipients_count"}},
	{"export contacts to a file", []string{"POST_mc_contacts_exports"}},
	{"import contacts", []string{"PUT_mc_contacts_imports"}},
	{"find contacts by their email addresses", []string{"POST_marketing_contacts_search_emails", "POST_mc_contacts_search"}},
	{"add or update a marketing contact", []string{"PUT_mc_contacts"}},
	{"list email designs", []string{"LIST_designs"}},
	{"make a copy of a design", []string{"POST_design_dup"}},
	{"get all ip addresses on the account", []string{"GET_ips"}},
	{"create an IP pool", []string{"POST_ips_pools"}},
	{"rename an ip pool", []string{"PUT_ips_pools_pool_name"}},
	{"start warming up an IP", []string{"POST_ips_warmup"}},
	{"stop the warmup of an ip address", []string{"DELETE_ips_warmup_ip_address"}},
	{"send an email", []string{"POST_mail_send"}},
	{"update the footer mail setting", []string{"PATCH_mail_settings_footer"}},
	{"change bounce purge settings", []string{"PATCH_mail_settings_bounce_purge"}},
	{"forward spam reports to an address", []string{"PATCH_mail_settings_forward_spam", "GET_mail_settings_forward_spam"}},
	{"create a sender identity", []string{"POST_senders", "POST_marketing_senders"}},
	{"resend the sender verification email", []string{"POST_v3_senders_sender_id_resend_verification", "POST_verified_senders_resend_id"}},
	{"list subusers", []string{"GET_subusers"}},
	{"create a subuser", []string{"POST_subusers"}},
	{"disable a subuser", []string{"PATCH_subusers_subuser_name"}},
	{"monthly statistics of all subusers", []string{"GET_subusers_stats_monthly"}},
	{"list bounced emails", []string{"GET_suppression_bounces"}},
	{"delete spam reports", []string{"DELETE_suppression_spam_reports"}},
	{"show blocked addresses", []string{"GET_suppression_blocks"}},
	{"list invalid email addresses", []string{"GET_suppression_invalid_emails"}},
	{"invite a teammate", []string{"POST_v3_teammates"}},
	{"change a teammate's permissions", []string{"PATCH_v3_teammates_username"}},
	{"create a transactional template", []string{"POST_templates"}},
	{"activate a template version", []string{"POST_templates_template_id_versions_version_id_activate"}},
	{"enable click tracking", []string{"PATCH_tracking_settings_click"}},
	{"google analytics tracking settings", []string{"GET_tracking_settings_google_analytics", "PATCH_tracking_settings_google_analytics"}},
	{"check my credit balance", []string{"GET_user_credits"}},
	{"change my password", []string{"PUT_user_password"}},
	{"change the email address of my account", []string{"PUT_user_email"}},
	{"configure the event webhook", []string{"PATCH_user_webhooks_event_settings"}},
	{"inbound parse settings", []string{"GET_user_webhooks_parse_settings"}},
	{"validate an email address", []string{"POST_validations_email"}},
	{"authenticate a sending domain", []string{"POST_whitelabel_domains"}},
	{"set up reverse dns for an ip", []string{"POST_whitelabel_ips"}},
	{"create a branded link", []string{"POST_whitelabel_links"}},
	{"cancel a scheduled send", []string{"POST_user_scheduled_sends"}},
	{"global email statistics", []string{"GET_stats"}},
	{"download messages as csv", []string{"POST_v3_messages_download", "GET_v3_messages_download_download_uuid"}},
	{"filter the email activity feed", []string{"GET_messages"}},
	{"approve a teammate's access request", []string{"PATCH_v3_scopes_requests_approve_id"}},
	{"delete a segment", []string{"DELETE_segments_segment_id", "DELETE_marketing_segments_segment_id", "DELETE_contactdb_segments_segment_id"}},
	{"enforced TLS settings", []string{"GET_user_settings_enforced_tls", "PATCH_user_settings_enforced_tls"}},
}

// quality measures recall@1, recall@5 and MRR (over the top 10) of the
// index's ranking on qualityCases.
func quality(t *testing.T, s *Service, verbose bool) (r1, r5, r10, mrr float64) {
	return qualityWith(t, s, func(op string) string { return "sendgrid_" + op }, verbose)
}

func qualityWith(t *testing.T, s *Service, toolName func(op string) string, verbose bool) (r1, r5, r10, mrr float64) {
	for _, c := range qualityCases {
		out, err := s.Search(context.Background(), SearchInput{Queries: []string{c.query}})
		if err != nil {
			t.Fatalf("search %q: %v", c.query, err)
		}
		want := map[string]bool{}
		for _, w := range c.want {
			want[toolName(w)] = true
		}
		rank := 0
		for i, r := range out.Tools {
			if want[r.Name] {
				rank = i + 1
				break
			}
		}
		if rank == 1 {
			r1++
		}
		if rank >= 1 && rank <= 5 {
			r5++
		}
		if rank >= 1 && rank <= 10 {
			r10++
		}
		if rank > 0 {
			mrr += 1 / float64(rank)
		}
		if verbose && rank != 1 {
			var top []string
			for i, r := range out.Tools {
				if i == 3 {
					break
				}
				top = append(top, strings.TrimPrefix(r.Name, "sendgrid_"))
			}
			t.Logf("rank %d for %q (want %v); top: %v", rank, c.query, c.want, top)
		}
	}
	n := float64(len(qualityCases))
	return r1 / n, r5 / n, r10 / n, mrr / n
}

// catalogTools loads the document through the real OpenAPI catalog, as the
// gateway does, and maps each sanitized operationId to its action name.
func catalogTools(t *testing.T, path string) (*CatalogSource, map[string]string) {
	t.Helper()
	cat, err := catalog.New([]catalog.Source{{Name: "sendgrid", SpecURL: path}}, &catalog.Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	byOp := map[string]string{}
	for _, a := range cat.Response().Actions {
		byOp[strings.Trim(nonWord.ReplaceAllString(a.OperationID, "_"), "_")] = a.Name
	}
	return &CatalogSource{C: cat}, byOp
}

// TestSearchQualitySendGrid measures the tfidf strategy on qualityCases over
// the actions the catalog builds from the SendGrid document (their names,
// descriptions, schemas and tags), and a plain BM25 over names and summaries
// for comparison.
func TestSearchQualitySendGrid(t *testing.T) {
	if len(qualityCases) < 50 {
		t.Fatalf("only %d cases", len(qualityCases))
	}
	src, byOp := catalogTools(t, sendgridDoc(t))
	ix, err := NewIndex([]ToolSource{src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ix.Len() < 300 {
		t.Fatalf("catalog built only %d actions", ix.Len())
	}
	rename := func(op string) string {
		if n, ok := byOp[op]; ok {
			return n
		}
		t.Fatalf("no catalog action for operation %s", op)
		return ""
	}
	r1, r5, r10, mrr := qualityWith(t, NewService(ix, nil), rename, testing.Verbose())
	t.Logf("tfidf over %d catalog actions, %d queries: recall@1 %.3f, recall@5 %.3f, recall@10 %.3f, MRR %.3f", ix.Len(), len(qualityCases), r1, r5, r10, mrr)
	b1, b5, bmrr := plainBM25Quality(ix.Tools(), rename)
	t.Logf("plain BM25 over names and summaries (no camelCase split, stemming or synonyms): recall@1 %.3f, recall@5 %.3f, MRR %.3f", b1, b5, bmrr)
	if r5 < 0.9 || r1 < 0.75 {
		t.Errorf("search quality below the floor: recall@1 %.3f (floor 0.75), recall@5 %.3f (floor 0.9)", r1, r5)
	}
}

// plainBM25Quality is the baseline: Okapi BM25 (k1 1.2, b 0.75) over the
// tool name and the first line of its description, lowercase words split on
// anything but letters and digits.
func plainBM25Quality(tools []Tool, toolName func(string) string) (r1, r5, mrr float64) {
	split := regexp.MustCompile(`[^a-z0-9]+`)
	words := func(s string) []string {
		var out []string
		for _, w := range split.Split(strings.ToLower(s), -1) {
			if w != "" {
				out = append(out, w)
			}
		}
		return out
	}
	docs := make([][]string, len(tools))
	df := map[string]float64{}
	var total float64
	for i, t := range tools {
		summary, _, _ := strings.Cut(t.Description, "\n")
		docs[i] = words(t.Name + " " + summary)
		total += float64(len(docs[i]))
		seen := map[string]bool{}
		for _, w := range docs[i] {
			if !seen[w] {
				df[w]++
				seen[w] = true
			}
		}
	}
	avg, n := total/float64(len(docs)), float64(len(docs))
	for _, c := range qualityCases {
		q := words(c.query)
		type hit struct {
			i int
			s float64
		}
		var hits []hit
		for i, d := range docs {
			tf := map[string]float64{}
			for _, w := range d {
				tf[w]++
			}
			var s float64
			for _, w := range q {
				if f := tf[w]; f > 0 {
					idf := math.Log(1 + (n-df[w]+0.5)/(df[w]+0.5))
					s += idf * f * 2.2 / (f + 1.2*(0.25+0.75*float64(len(d))/avg))
				}
			}
			if s > 0 {
				hits = append(hits, hit{i, s})
			}
		}
		sort.Slice(hits, func(a, b int) bool { return hits[a].s > hits[b].s })
		want := map[string]bool{}
		for _, w := range c.want {
			want[toolName(w)] = true
		}
		for rank, h := range hits {
			if rank == 10 {
				break
			}
			if want[tools[h.i].Name] {
				if rank == 0 {
					r1++
				}
				if rank < 5 {
					r5++
				}
				mrr += 1 / float64(rank+1)
				break
			}
		}
	}
	return r1 / float64(len(qualityCases)), r5 / float64(len(qualityCases)), mrr / float64(len(qualityCases))
}
