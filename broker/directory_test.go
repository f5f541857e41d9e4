package broker

import (
	"net/http"
	"strings"
	"testing"
)

// TestSessionDirectory: a broker being replaced (a config reload) runs a
// session that waits for a caller-answered tool; the status request and the
// answer reach the new broker, which hands them to the old one through the
// shared directory. Without the directory they get NOT_FOUND.
func TestSessionDirectory(t *testing.T) {
	dir := NewSessionDirectory()
	withDir := func(o *BrokerOptions) { o.Directory = dir }
	_, oldSrv := newTestBroker(t, withDir)
	_, newSrv := newTestBroker(t, withDir)
	_, loneSrv := newTestBroker(t, nil) // same process, no directory

	s := startExecute(t, oldSrv.URL, map[string]any{"code": `return await callTool("client:prompt", {question: "?"})`}, nil)
	var sess Session
	s.next().decode(t, &sess)
	var call ToolCallPayload
	s.next().decode(t, &call)
	if dir.Len() != 1 {
		t.Fatalf("directory lists %d sessions, want 1", dir.Len())
	}

	code, _, body := do(t, http.MethodGet, loneSrv.URL+"/sessions/"+sess.ID, nil, nil)
	if code != http.StatusNotFound {
		t.Errorf("broker outside the directory: GET %d %s, want 404", code, body)
	}
	code, _, body = do(t, http.MethodGet, newSrv.URL+"/sessions/"+sess.ID, nil, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"status":"running"`) {
		t.Errorf("GET through the new broker: %d %s", code, body)
	}
	code, _, body = do(t, http.MethodPost, newSrv.URL+"/sessions/"+sess.ID+"/tool-result",
		map[string]any{"callId": call.CallID, "result": "yes"}, nil)
	if code != http.StatusOK {
		t.Fatalf("tool-result through the new broker: %d %s", code, body)
	}
	evs := s.rest()
	if got := types(evs); got != "tool_result,result" || !strings.Contains(string(evs[1].Payload), `"result":"yes"`) {
		t.Fatalf("old broker's stream after the answer: %s %s", got, evs[len(evs)-1].Payload)
	}
	if dir.Len() != 0 {
		t.Errorf("directory lists %d sessions after the run ended, want 0", dir.Len())
	}
}
