# Sourced by the proxy benchmarks (bench/proxy_overhead.sh, bench/workers_scaling.sh): the
# upstream they share, nginx answering every request with the same small chat completion.
# write_nginx_json DIR PORT: writes DIR/nginx.conf (and DIR/nginx for request bodies); run it
# with `nginx -c DIR/nginx.conf -p DIR`.
write_nginx_json() {
  local dir=$1 port=$2
  mkdir -p "$dir/nginx"
  cat > "$dir/nginx.conf" <<NGX
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/nginx.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/nginx;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$port;
    client_body_buffer_size 64k;
    location / {
      default_type application/json;
      return 200 '{"id":"cmpl-1","object":"chat.completion","model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":1,"total_tokens":1001}}';
    }
  }
}
NGX
}
