// Drives k3 serve with the official ollama npm client, as
// TestOllamaJSClient runs it: node ollama-client.cjs CLIENT_DIR BASE_URL
// MODEL. CLIENT_DIR holds node_modules/ollama. It prints one JSON object
// of what the client returned; the Go test checks it. A call the client
// rejects is recorded with its message and status, not thrown.
'use strict'
const path = require('node:path')
const { createRequire } = require('node:module')

const [dir, host, model] = process.argv.slice(2)
const { Ollama } = createRequire(path.join(dir, 'package.json'))('ollama')
const client = new Ollama({ host })

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the weather',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  },
}]
const question = { role: 'user', content: 'What is the weather in Paris?' }

async function failure(f) {
  try {
    await f()
    return null
  } catch (e) {
    return { name: e.name, message: e.message, status: e.status_code }
  }
}

async function main() {
  const out = {}
  out.version = await client.version()
  out.list = await client.list()
  out.show = await client.show({ model })
  out.ps = await client.ps()

  // Tools, not streamed (the client's default).
  const whole = await client.chat({ model, messages: [question], tools, options: { num_predict: 400 } })
  out.chat = whole

  // Tools, streamed: every part, in order.
  out.chatParts = []
  for await (const part of await client.chat({ model, messages: [question], tools, stream: true, options: { num_predict: 400 } })) {
    out.chatParts.push(part)
  }

  // The tool's result goes back, with the assistant's message as the
  // client got it.
  const call = whole.message.tool_calls[0]
  out.followUp = await client.chat({
    model, tools, options: { num_predict: 400 },
    messages: [question, whole.message, { role: 'tool', tool_name: call.function.name, content: '18 C and sunny' }],
  })

  // generate, streamed and not, thinking off, a bound on the reply.
  out.generate = await client.generate({ model, prompt: 'Why is the sky blue?', think: false, options: { num_predict: 5, temperature: 0 } })
  out.generateParts = []
  for await (const part of await client.generate({ model, prompt: 'Why is the sky blue?', think: false, stream: true, options: { num_predict: 5, temperature: 0 } })) {
    out.generateParts.push(part)
  }

  // Errors reach the client as Ollama's.
  out.unknownModel = await failure(() => client.chat({ model: 'llama3.2', messages: [question] }))
  out.badThinkStreamed = await failure(async () => {
    for await (const _ of await client.chat({ model, messages: [question], think: 'extreme', stream: true })) { /* none */ }
  })
  out.image = await failure(() => client.chat({ model, messages: [{ ...question, images: [new Uint8Array([1, 2, 3])] }] }))
  process.stdout.write(JSON.stringify(out))
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`)
  process.exit(1)
})
