-- Helpers a flow script finds in its environment (docs/flows.md, Flows in
-- Lua). Each returns the IR table it names; `array` is installed from Rust
-- before this chunk runs.

local null = json.null

-- A table with a string `op` is an expression; anything else is a literal.
local function expr(v)
  if type(v) == "table" and type(rawget(v, "op")) == "string" then
    return v
  end
  if v == nil then
    v = null
  end
  return { op = "lit", value = v }
end

-- A write target: a string is a path, a table is taken as it is.
local function target(v, what, level)
  if type(v) == "string" then
    return { op = "path", at = v }
  end
  if type(v) ~= "table" then
    error(what .. " must be a path string or an expression", level + 1)
  end
  return v
end

local function text(v, what, level)
  if type(v) ~= "string" then
    error(what .. " must be a string, not a " .. type(v), level + 1)
  end
  return v
end

function path(at)
  return { op = "path", at = text(at, "path(at)", 2) }
end

function select(at)
  return { op = "select", at = text(at, "select(at)", 2) }
end

function lit(v)
  if v == nil then
    v = null
  end
  return { op = "lit", value = v }
end

function tmpl(t)
  return { op = "template", text = text(t, "tmpl(text)", 2) }
end

-- step(agent, input, out [, opts]): a string input is a template; opts
-- (name, retry, timeout_secs, queue_timeout_secs) are copied into the node.
function step(agent, input, out, opts)
  local node = {
    kind = "step",
    ref = text(agent, "step(agent)", 2),
    out = target(out, "step(out)", 2),
  }
  if type(input) == "string" then
    node["in"] = { op = "template", text = input }
  else
    node["in"] = expr(input)
  end
  if opts ~= nil then
    if type(opts) ~= "table" then
      error("step(opts) must be a table", 2)
    end
    for k, v in pairs(opts) do
      node[k] = v
    end
  end
  return node
end

-- seq{a, b, ...}: the nodes in order.
function seq(children)
  if type(children) ~= "table" then
    error("seq{...} takes a list of nodes", 2)
  end
  local list = array()
  for i, child in ipairs(children) do
    list[i] = child
  end
  return { kind = "seq", children = list }
end

-- fanout{items=, bind=, body=, out= [, join=, concurrency=]}: a plain list
-- of items is a literal array and sets concurrency to its length; join
-- defaults to "all".
function fanout(spec)
  if type(spec) ~= "table" then
    error("fanout{...} takes a table", 2)
  end
  local items = spec.items
  local concurrency = spec.concurrency
  if type(items) == "table" and type(rawget(items, "op")) ~= "string" then
    local list = array()
    for i, item in ipairs(items) do
      list[i] = item
    end
    items = { op = "lit", value = list }
    if concurrency == nil then
      concurrency = #list
    end
  elseif type(items) ~= "table" then
    error("fanout{items} must be a list or an expression", 2)
  end
  return {
    kind = "fanout",
    items = items,
    bind = target(spec.bind, "fanout{bind}", 2),
    body = spec.body,
    out = target(spec.out, "fanout{out}", 2),
    join = spec.join or "all",
    concurrency = concurrency,
  }
end

-- branch(cond, then, else)
function branch(cond, yes, no)
  return { kind = "branch", cond = expr(cond), ["then"] = yes, ["else"] = no }
end

-- set(at, value): a `let` node; a value that is not an expression is a literal.
function set(at, value)
  return { kind = "let", at = target(at, "set(at)", 2), value = expr(value) }
end
