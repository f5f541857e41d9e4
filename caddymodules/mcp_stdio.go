package caddymodules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "codemode-mcp-stdio",
		Usage: "--config <path> [--adapter <name>]",
		Short: "Serves the codemode meta-tools over MCP stdio",
		Long: `
Serves meta:search, meta:describe, meta:execute and meta:invoke over MCP on
standard input and output, for MCP clients that launch their servers (desktop
agents, IDEs). It reads the same Caddyfile or JSON config as 'caddy run' and
runs only its codemode app: the HTTP servers, the admin endpoint and every
other app are left out, so it can run beside a gateway started from the same
file. Logs go to standard error. It exits when standard input closes.
`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().StringP("config", "c", "", "Configuration file (Caddyfile or JSON)")
			cmd.Flags().StringP("adapter", "a", "", "Name of config adapter to apply")
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(cmdMCPStdio)
		},
	})
}

func cmdMCPStdio(fl caddycmd.Flags) (int, error) {
	raw, _, _, err := caddycmd.LoadConfig(fl.String("config"), fl.String("adapter"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	if len(raw) == 0 {
		return caddy.ExitCodeFailedStartup, errors.New("codemode-mcp-stdio: --config is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := serveMCPStdio(ctx, raw, &mcp.StdioTransport{}); err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	return caddy.ExitCodeSuccess, nil
}

// codemodeOnlyConfig keeps, of a full Caddy JSON config, what the codemode
// app needs (the app itself, the pki app, storage and logging), disables the admin
// endpoint and the autosave of the config (which would overwrite the one of
// a gateway running from the same file).
func codemodeOnlyConfig(raw []byte) ([]byte, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("decoding config: %w", err)
	}
	var apps map[string]json.RawMessage
	if a, ok := cfg["apps"]; ok {
		if err := json.Unmarshal(a, &apps); err != nil {
			return nil, fmt.Errorf("decoding apps: %w", err)
		}
	}
	code, ok := apps["codemode"]
	if !ok {
		code = json.RawMessage(`{}`)
	}
	keep := map[string]json.RawMessage{"codemode": code}
	// The pki app holds certificate authorities only (it listens on
	// nothing); the codemode app may trust one of them (auth
	// client_id_metadata's trust_pool pki_root).
	if pki, ok := apps["pki"]; ok {
		keep["pki"] = pki
	}
	out := map[string]any{
		"admin": map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"apps":  keep,
	}
	for _, k := range []string{"storage", "logging"} {
		if v, ok := cfg[k]; ok {
			out[k] = v
		}
	}
	return json.Marshal(out)
}

// serveMCPStdio runs the codemode app of the config and serves its
// meta-tools on t until the client disconnects or ctx ends.
func serveMCPStdio(ctx context.Context, raw []byte, t mcp.Transport) error {
	cfg, err := codemodeOnlyConfig(raw)
	if err != nil {
		return err
	}
	if err := caddy.Load(cfg, true); err != nil {
		return fmt.Errorf("running the codemode app: %w", err)
	}
	defer caddy.Stop()
	v, err := caddy.ActiveContext().App("codemode")
	if err != nil {
		return fmt.Errorf("codemode app: %w", err)
	}
	srv := v.(*App).MetaServer()
	if srv == nil {
		return errors.New("codemode app: the meta-tools are not provisioned")
	}
	if err := srv.Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("serving MCP on stdio: %w", err)
	}
	return nil
}
